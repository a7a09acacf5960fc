package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/options"
)

// Failure is the context of a final failure, written into the envelope.
type Failure struct {
	Reason Reason
	Err    error
	// Attempts is the durable attempt count (0 if unknown).
	Attempts int
	// History is the per-attempt ledger (may be empty).
	History []idempotency.AttemptRecord
	// OperationKey and Fingerprint identify the operation (may be empty for no_key).
	OperationKey, Fingerprint string
	// Topic and Handler default to the Watermill values in the message context.
	Topic, Handler string
	// ErrorTypes overrides the type chain of Err in the envelope when set.
	ErrorTypes string
	// Namespace is the handler's dedup namespace (may be empty).
	Namespace string
	// Retention is the dedup store's retention (0: unknown).
	Retention time.Duration
	// TraceID and SpanID of the failing attempt, hex (may be empty).
	TraceID, SpanID string
	// Traceparent is the W3C traceparent of the dead-letter span (may be
	// empty: tracing off).
	Traceparent string
	// At is when the message was dead-lettered (default: now).
	At time.Time
}

// FailureFrom builds a Failure from an error: the FinalError in its chain
// gives reason, attempts and history; any other error is ReasonPermanent.
func FailureFrom(err error) Failure {
	f := Failure{Reason: ReasonPermanent, Err: err}
	if fe, ok := AsFinal(err); ok {
		f.Reason, f.Err, f.Attempts, f.History = fe.Reason, fe.Err, fe.Attempts, fe.History
		f.OperationKey, f.Fingerprint = fe.OperationKey, fe.Fingerprint
		f.Namespace, f.Retention, f.ErrorTypes = fe.Namespace, fe.Retention, fe.ErrorTypes
	}
	return f
}

// redactor rewrites an error text before it is written (see WithRedactor).
type redactor = func(text string) string

// Wrap returns the dead-letter message for msg, as a Publisher publishes
// it: msg's payload and metadata byte for byte, plus the surely_* keys
// describing f (see the package doc). Its UUID is derived from msg's (see
// Copies in the package doc); the original UUID is in the envelope. Error
// texts pass through redact (nil: unchanged); the error's call site
// (surely_error_site, a function and a file:line) does not. host and
// group may be empty.
func Wrap(msg *message.Message, f Failure, redact func(text string) string, host, group string) *message.Message {
	redact = safeRedactor(redact)
	out := message.NewMessage(envelope.DeadLetterID(msg.UUID, msg.Metadata.Get(KeyReplayID)), msg.Payload)
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	f = f.withDefaults(msg.Context())
	errText := ""
	if f.Err != nil {
		errText = redact(f.Err.Error())
	}
	md := out.Metadata
	md[KeyVersion] = envelope.Version
	md[KeyOriginalUUID] = msg.UUID
	md[KeyReason] = string(f.Reason)
	md[KeyError] = idem.Truncate(errText, defaults.MaxErrorLen)
	md[KeyErrorTypes] = f.ErrorTypes
	if f.ErrorTypes == "" {
		md[KeyErrorTypes] = envelope.ErrorTypes(f.Err)
	}
	if site := envelope.ErrorSite(f.Err, f.History); site != "" {
		// A code location, not data: the redactor does not see it.
		md[KeyErrorSite] = site
	}
	md[KeyAttempts] = strconv.Itoa(f.Attempts)
	md[KeyDeadLetteredAt] = f.At.UTC().Format(time.RFC3339Nano)
	first, last := failureWindow(f.History, f.At)
	md[KeyFirstFailureAt] = first.UTC().Format(time.RFC3339Nano)
	md[KeyLastFailureAt] = last.UTC().Format(time.RFC3339Nano)
	md[KeyHistory] = historyJSON(f.History, redact)
	md[KeyOriginalTopic] = f.Topic
	md[KeyHandler] = f.Handler
	md[KeyConsumerGroup] = group
	md[KeyOperationKey] = f.OperationKey
	md[KeyFingerprint] = f.Fingerprint
	md[KeyTraceID] = f.TraceID
	md[KeySpanID] = f.SpanID
	md[KeyHost] = host
	f.setOptionalKeys(md)
	return out
}

// safeRedactor returns redact with its panics contained, or the identity
// when redact is nil.
func safeRedactor(redact redactor) redactor {
	if redact == nil {
		return func(s string) string { return s }
	}
	return contained(redact)
}

// withDefaults fills the topic and handler from the Watermill values in
// ctx and the time with now, where f leaves them empty.
func (f Failure) withDefaults(ctx context.Context) Failure {
	if f.Topic == "" {
		f.Topic = message.SubscribeTopicFromCtx(ctx)
	}
	if f.Handler == "" {
		f.Handler = message.HandlerNameFromCtx(ctx)
	}
	if f.At.IsZero() {
		f.At = time.Now()
	}
	return f
}

// setOptionalKeys writes the keys that are present only when f has a
// value for them.
func (f Failure) setOptionalKeys(md message.Metadata) {
	if f.Namespace != "" {
		md[KeyNamespace] = f.Namespace
	}
	if f.Retention > 0 {
		md[KeyRetention] = f.Retention.String()
	}
	if f.Traceparent != "" {
		md[KeyDeadLetterTraceparent] = f.Traceparent
	}
}

// failureWindow returns the earliest and latest time of the failed or
// unknown attempts in history (an attempt's end, or its start if it has
// no end); both are at when there is none.
func failureWindow(history []idempotency.AttemptRecord, at time.Time) (first, last time.Time) {
	first, last = at, at
	seen := false
	for _, h := range history {
		if h.Result != idempotency.ResultFailed && h.Result != idempotency.ResultUnknown {
			continue
		}
		t := h.Ended
		if t.IsZero() {
			t = h.Started
		}
		if !seen || t.Before(first) {
			first = t
		}
		if !seen || t.After(last) {
			last = t
		}
		seen = true
	}
	return first, last
}

func historyJSON(h []idempotency.AttemptRecord, redact redactor) string {
	h = append([]idempotency.AttemptRecord(nil), h...)
	for i := range h {
		h[i].Error = redact(h[i].Error)
		h[i].Stack = redact(h[i].Stack)
	}
	shrunk := false
	for {
		b, err := json.Marshal(h)
		if err != nil {
			return "[]"
		}
		if len(b) <= envelope.MaxHistoryBytes || len(h) == 0 {
			return string(b)
		}
		// Drop stacks of older entries first, then the oldest entries.
		dropped := false
		for i := 0; i < len(h)-1; i++ {
			if h[i].Stack != "" {
				h[i].Stack = ""
				dropped = true
			}
		}
		if !dropped {
			if len(h) > 1 {
				h = h[1:]
				continue
			}
			if shrunk {
				// Unreachable: every text field of the entry is bounded
				// below; kept so that no input can loop.
				return "[]"
			}
			// One entry too large on its own: bound every text field of it
			// (a store or a caller may hand over any of them unbounded).
			shrunk = true
			e := &h[0]
			e.Stack = ""
			e.Error = idem.Truncate(e.Error, 512)
			e.Result = idempotency.AttemptResult(idem.Truncate(string(e.Result), 256))
			for _, s := range []*string{&e.Type, &e.Reason, &e.TraceID, &e.SpanID, &e.Owner} {
				*s = idem.Truncate(*s, 256)
			}
		}
	}
}

// Publisher publishes dead letters to one topic through any Watermill
// publisher. It never closes the publisher it was given.
type Publisher struct {
	pub    message.Publisher
	topic  string
	redact redactor
	host   string
	group  string
}

// WithRedactor sets the hook every error text (the error, the history's
// errors and stacks) passes through before NewPublisher's publisher writes
// it (default: none, texts unchanged). Use it to strip secrets such as
// connection strings or tokens. The error's call site
// (surely_error_site, a function name and a file:line) is code, not
// data: it is not redacted. A redactor that panics is contained: the
// text it was given is replaced by "[text withheld: the redactor
// panicked]", never written unredacted.
func WithRedactor(r func(text string) string) Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if r == nil {
			return fmt.Errorf("%w: nil redactor", ErrInvalidOption)
		}
		s.Put(nameRedactor, r)
		return nil
	})
}

// WithConsumerGroup names the consumer group NewPublisher's publisher
// writes into the envelope (default: empty).
func WithConsumerGroup(group string) Option {
	return options.Func[options.DLQ](func(s *options.Set) error { s.Put(nameConsumerGroup, group); return nil })
}

// NewPublisher returns a dead-letter publisher to topic. It takes
// WithRedactor and WithConsumerGroup. The envelope's host is the process's
// host name (os.Hostname).
func NewPublisher(pub message.Publisher, topic string, opts ...Option) (*Publisher, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: nil publisher", ErrInvalidOption)
	}
	if topic == "" {
		return nil, fmt.Errorf("%w: empty dead-letter topic", ErrInvalidOption)
	}
	s, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ErrInvalidOption, "dlq.NewPublisher", nameRedactor, nameConsumerGroup); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Publisher{
		pub: pub, topic: topic,
		redact: options.Get[redactor](s, nameRedactor, nil),
		host:   host,
		group:  options.Get(s, nameConsumerGroup, ""),
	}, nil
}

// Topic is the topic p publishes dead letters to: the dead-letter step
// names its span after it (messaging.destination.name).
func (p *Publisher) Topic() string { return p.topic }

// contained wraps redact so that a panic in it yields
// a placeholder ("[text withheld: the redactor panicked]").
func contained(redact redactor) redactor {
	return func(s string) (out string) {
		defer func() {
			if recover() != nil {
				out = envelope.RedactorPanicked
			}
		}()
		return redact(s)
	}
}

// Publish writes the envelope of msg. The source message may be acked only
// after Publish returned nil.
func (p *Publisher) Publish(ctx context.Context, msg *message.Message, f Failure) error {
	env := Wrap(msg, f, p.redact, p.host, p.group)
	env.SetContext(ctx)
	if err := p.pub.Publish(p.topic, env); err != nil {
		return fmt.Errorf("dlq: publish to %q: %w", p.topic, err)
	}
	return nil
}
