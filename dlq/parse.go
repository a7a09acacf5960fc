package dlq

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
)

// Envelope is what surely wrote about a dead letter, read back from its
// metadata by ParseEnvelope: the fields of the package doc's key table. A
// field whose key is missing is zero.
type Envelope struct {
	// Version is the envelope's version ("1").
	Version string
	Reason  Reason
	// Error is the final error's text (redacted, at most 2 KiB), and
	// ErrorTypes the Go types of its chain, outermost first, separated by
	// " > " (a join's branches in brackets).
	Error, ErrorTypes string
	// ErrorSite is where the error arose, "function (file.go:line)": the
	// panicking function for a panic, else the top frame of the innermost
	// error of the chain that carries a stack (github.com/pkg/errors and
	// the like); frames of the runtime, Watermill and surely are skipped.
	// Empty when not known: a Go error carries no stack unless a library
	// adds one.
	ErrorSite string
	// Attempts is the durable attempt count (0: unknown).
	Attempts int
	// FirstFailureAt and LastFailureAt bound the failed attempts of
	// History; DeadLetteredAt is when the message was dead-lettered.
	FirstFailureAt, LastFailureAt, DeadLetteredAt time.Time
	// History is the per-attempt ledger, oldest first (bounded to 16 KiB
	// of JSON: the oldest entries, then the stacks of all but the newest,
	// are dropped to fit).
	History []idempotency.AttemptRecord
	// OriginalTopic, Handler and ConsumerGroup say where the message was
	// consumed; OriginalUUID is its UUID (the dead letter's own is derived
	// from it).
	OriginalTopic, Handler, ConsumerGroup, OriginalUUID string
	// OperationKey, Fingerprint and Namespace identify the operation and
	// where its record is kept; Retention is how long the store keeps
	// records (0: not reported).
	OperationKey, Fingerprint, Namespace string
	Retention                            time.Duration
	// TraceID and SpanID are those of the failing attempt; Traceparent is
	// the W3C traceparent of the dead-letter span (empty: tracing off).
	TraceID, SpanID, Traceparent string
	// Host is the host name of the process that dead-lettered it.
	Host string
	// ReplayOf and ReplayID are set when the message that failed was
	// republished by a replay run: the archived dead letter it replayed,
	// and the run.
	ReplayOf, ReplayID string
}

// errNotEnvelope is returned by ParseEnvelope for a message without an
// envelope version.
var errNotEnvelope = errors.New("dlq: not a dead letter: no " + KeyVersion)

// ParseEnvelope reads the envelope of a dead-lettered message. A message
// that is not one (no envelope version) is an error. A field whose value
// does not parse (a number, a time, a duration, the history's JSON) is
// left zero and reported in the error, together with every other such
// field; the fields that did parse are returned with it.
func ParseEnvelope(msg *message.Message) (Envelope, error) {
	md := msg.Metadata
	e := Envelope{
		Version:       md.Get(KeyVersion),
		Reason:        Reason(md.Get(KeyReason)),
		Error:         md.Get(KeyError),
		ErrorTypes:    md.Get(KeyErrorTypes),
		ErrorSite:     md.Get(KeyErrorSite),
		OriginalTopic: md.Get(KeyOriginalTopic),
		Handler:       md.Get(KeyHandler),
		ConsumerGroup: md.Get(KeyConsumerGroup),
		OriginalUUID:  md.Get(KeyOriginalUUID),
		OperationKey:  md.Get(KeyOperationKey),
		Fingerprint:   md.Get(KeyFingerprint),
		Namespace:     md.Get(KeyNamespace),
		TraceID:       md.Get(KeyTraceID),
		SpanID:        md.Get(KeySpanID),
		Traceparent:   md.Get(KeyDeadLetterTraceparent),
		Host:          md.Get(KeyHost),
		ReplayOf:      md.Get(KeyReplayOf),
		ReplayID:      md.Get(KeyReplayID),
	}
	if e.Version == "" {
		return e, errNotEnvelope
	}
	p := parser{md: md}
	e.Attempts = p.int(KeyAttempts)
	e.FirstFailureAt = p.time(KeyFirstFailureAt)
	e.LastFailureAt = p.time(KeyLastFailureAt)
	e.DeadLetteredAt = p.time(KeyDeadLetteredAt)
	e.Retention = p.duration(KeyRetention)
	h, err := envelope.ParseHistory(md.Get(KeyHistory))
	if err != nil {
		err = fmt.Errorf("dlq: %s: %w", KeyHistory, err)
	}
	e.History = h
	p.errs = append(p.errs, err)
	return e, errors.Join(p.errs...)
}

// parser reads the typed fields of an envelope, collecting their errors.
type parser struct {
	md   message.Metadata
	errs []error
}

func (p *parser) fail(key, v string, err error) {
	p.errs = append(p.errs, fmt.Errorf("dlq: %s %q: %w", key, v, err))
}

func (p *parser) int(key string) int {
	v := p.md.Get(key)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.fail(key, v, err)
	}
	return n
}

func (p *parser) time(key string) time.Time {
	v := p.md.Get(key)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		p.fail(key, v, err)
	}
	return t
}

func (p *parser) duration(key string) time.Duration {
	v := p.md.Get(key)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.fail(key, v, err)
	}
	return d
}
