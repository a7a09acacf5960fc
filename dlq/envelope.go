package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/options"
)

// Metadata keys surely adds to a dead-lettered message. The original
// metadata is kept as it was; these keys are all prefixed "surely_".
const (
	KeyVersion        = "surely_dlq_version"
	KeyReason         = "surely_reason"
	KeyError          = "surely_error"
	KeyErrorTypes     = "surely_error_types"
	KeyAttempts       = "surely_attempts"
	KeyFirstFailureAt = "surely_first_failure_at"
	KeyLastFailureAt  = "surely_last_failure_at"
	KeyDeadLetteredAt = "surely_dead_lettered_at"
	KeyHistory        = "surely_history"
	KeyOriginalTopic  = "surely_original_topic"
	KeyHandler        = "surely_handler"
	KeyConsumerGroup  = "surely_consumer_group"
	KeyOperationKey   = "surely_operation_key"
	KeyFingerprint    = "surely_fingerprint"
	KeyTraceID        = "surely_trace_id"
	KeySpanID         = "surely_span_id"
	KeyHost           = "surely_host"
	KeyOriginalUUID   = "surely_original_uuid"
	// KeyNamespace is the dedup namespace of the handler, so the operation's
	// store record can be found (surely inspect, replay).
	KeyNamespace = "surely_namespace"
	// KeyRetention is the dedup store's retention (a Go duration) when the
	// store reports it (idempotency.RetentionReporter): a replay of a dead
	// letter older than this may find its record gone.
	KeyRetention = "surely_dedup_retention"
)

// Metadata keys a replay adds to a republished message.
const (
	// KeyReplayOf is the ID of the archived dead letter the message replays.
	KeyReplayOf = "surely_replay_of"
	// KeyReplayID is the ID of the replay run. The dedup step passes it to
	// Claim as ClaimRequest.Reopen, so an EXHAUSTED record gets a fresh
	// budget once per replay run.
	KeyReplayID = "surely_replay_id"
	// KeyReplayLink is the W3C traceparent of the dead-letter span, so the
	// replayed message's first attempt span links back to it.
	KeyReplayLink = "surely_replay_link"
	// KeyDeadLetterTraceparent is the W3C traceparent of the dead-letter
	// span, written into the envelope when tracing is on.
	KeyDeadLetterTraceparent = "surely_dlq_traceparent"
)

// uuidSpace is the UUIDv5 namespace of dead-letter UUIDs.
var uuidSpace = uuid.MustParse("6f1b3c1e-52a4-4d52-9a63-1d9f2f0c8e77")

// DeadLetterUUID is the UUID of the dead letter of the message with UUID
// original: derived (UUIDv5), so every copy of one message's dead letter has
// the same UUID, yet it differs from the original's. A broker that drops a
// publish whose id it has seen (JetStream's Nats-Msg-Id, SQS FIFO
// deduplication) would otherwise drop the dead letter as a duplicate of
// the original message.
func DeadLetterUUID(original string) string {
	return uuid.NewSHA1(uuidSpace, []byte("surely-dlq:"+original)).String()
}

// DeadLetterID is the UUID of msg's dead letter: DeadLetterUUID of its
// UUID, or, for a message republished by a replay run (KeyReplayID set),
// of its UUID and the run's ID. A replayed message that fails again is
// then a new archive entry carrying KeyReplayID, not a copy of the entry
// it replays, so the run can see its re-failures.
func DeadLetterID(msg *message.Message) string {
	if run := msg.Metadata.Get(KeyReplayID); run != "" {
		return DeadLetterUUID(msg.UUID + "\x00replay:" + run)
	}
	return DeadLetterUUID(msg.UUID)
}

// MaxHistoryBytes bounds the JSON of KeyHistory: oldest entries, then
// stacks of all but the newest entry, are dropped to fit.
const MaxHistoryBytes = 16 << 10

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
	// ErrorTypes overrides ErrorTypes(Err) in KeyErrorTypes when set.
	ErrorTypes string
	// Namespace is the handler's dedup namespace (may be empty).
	Namespace string
	// Retention is the dedup store's retention (0: unknown).
	Retention time.Duration
	// TraceID and SpanID of the failing attempt, hex (may be empty).
	TraceID, SpanID string
	// Traceparent is the W3C traceparent of the dead-letter span, written
	// to KeyDeadLetterTraceparent (may be empty: tracing off).
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

// Redactor rewrites an error text before it is written anywhere (envelope,
// history). Use it to strip secrets such as connection strings or tokens.
// A Redactor that panics is contained: the text it was given is replaced
// by RedactorPanicked, never written unredacted.
type Redactor func(text string) string

// Envelope returns the dead-letter message for msg: its payload and
// metadata byte for byte, plus the surely_* keys describing f. Its UUID is
// DeadLetterID(msg); the original UUID is in KeyOriginalUUID. Error
// texts pass through redact (nil: unchanged). host and group may be empty.
func Envelope(msg *message.Message, f Failure, redact Redactor, host, group string) *message.Message {
	redact = safeRedactor(redact)
	out := message.NewMessage(DeadLetterID(msg), msg.Payload)
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	f = f.withDefaults(msg.Context())
	errText := ""
	if f.Err != nil {
		errText = redact(f.Err.Error())
	}
	md := out.Metadata
	md[KeyVersion] = Version
	md[KeyOriginalUUID] = msg.UUID
	md[KeyReason] = string(f.Reason)
	md[KeyError] = idem.Truncate(errText, idem.MaxErrorLen)
	md[KeyErrorTypes] = f.ErrorTypes
	if f.ErrorTypes == "" {
		md[KeyErrorTypes] = ErrorTypes(f.Err)
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
func safeRedactor(redact Redactor) Redactor {
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

func historyJSON(h []idempotency.AttemptRecord, redact Redactor) string {
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
		if len(b) <= MaxHistoryBytes || len(h) == 0 {
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
			for _, s := range []*string{&e.Type, &e.Reason, &e.TraceID, &e.SpanID} {
				*s = idem.Truncate(*s, 256)
			}
		}
	}
}

// ParseHistory decodes KeyHistory of a dead-lettered message.
func ParseHistory(md message.Metadata) ([]idempotency.AttemptRecord, error) {
	var h []idempotency.AttemptRecord
	s := md.Get(KeyHistory)
	if s == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("dlq: %s: %w", KeyHistory, err)
	}
	return h, nil
}

// Publisher publishes dead letters to one topic through any Watermill
// publisher. It never closes the publisher it was given.
type Publisher struct {
	pub    message.Publisher
	topic  string
	redact Redactor
	host   string
	group  string
}

// WithRedactor sets the hook every error text passes through before
// NewPublisher's publisher writes it (default: none, texts unchanged).
func WithRedactor(r Redactor) Option {
	return func(s *options.Set) error {
		if r == nil {
			return fmt.Errorf("%w: nil redactor", ErrInvalidOption)
		}
		s.Put(nameRedactor, r)
		return nil
	}
}

// WithConsumerGroup names the consumer group NewPublisher's publisher
// writes to KeyConsumerGroup (default: empty).
func WithConsumerGroup(group string) Option {
	return func(s *options.Set) error { s.Put(nameConsumerGroup, group); return nil }
}

// WithHost overrides the host name NewPublisher's publisher writes to
// KeyHost (default os.Hostname).
func WithHost(host string) Option {
	return func(s *options.Set) error { s.Put(nameHost, host); return nil }
}

// NewPublisher returns a dead-letter publisher to topic. It takes
// WithRedactor, WithConsumerGroup and WithHost.
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
	if err := s.Check(ErrInvalidOption, "dlq.NewPublisher", nameRedactor, nameConsumerGroup, nameHost); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Publisher{
		pub: pub, topic: topic,
		redact: options.Get[Redactor](s, nameRedactor, nil),
		host:   options.Get(s, nameHost, host),
		group:  options.Get(s, nameConsumerGroup, ""),
	}, nil
}

// Topic is the dead-letter topic.
func (p *Publisher) Topic() string { return p.topic }

// RedactorPanicked replaces a text that a Redactor panicked on: a text
// that could not be redacted is never written.
const RedactorPanicked = "[text withheld: the redactor panicked]"

// contained wraps redact so that a panic in it yields RedactorPanicked.
func contained(redact Redactor) Redactor {
	return func(s string) (out string) {
		defer func() {
			if recover() != nil {
				out = RedactorPanicked
			}
		}()
		return redact(s)
	}
}

// Publish writes the envelope of msg. The source message may be acked only
// after Publish returned nil.
func (p *Publisher) Publish(ctx context.Context, msg *message.Message, f Failure) error {
	env := Envelope(msg, f, p.redact, p.host, p.group)
	env.SetContext(ctx)
	if err := p.pub.Publish(p.topic, env); err != nil {
		return fmt.Errorf("dlq: publish to %q: %w", p.topic, err)
	}
	return nil
}
