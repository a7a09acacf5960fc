// Package envelope is the wire format of surely's dead-letter envelope:
// every metadata key surely adds to a dead-lettered message (and a replay
// to a republished one), the envelope version, the derived dead-letter
// UUID, and the helpers that write and read the error type chain and the
// attempt history. It is internal: dlq, its archives, replay, the
// middleware and cmd/surely share it. Users read an envelope through
// dlq.ParseEnvelope; the dlq package doc lists every key.
package envelope

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/surely-dev/surely/idempotency"
)

// Version is the envelope version written to KeyVersion.
const Version = "1"

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
	// KeyDeadLetterTraceparent is the W3C traceparent of the dead-letter
	// span, written into the envelope when tracing is on.
	KeyDeadLetterTraceparent = "surely_dlq_traceparent"
	// KeyErrorSite is where the error arose (ErrorSite), when known. It
	// is a code location, not data: no redactor sees it.
	KeyErrorSite = "surely_error_site"
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
)

// KeyDecodeHeaders holds, beside delivery.KeyDecodeError, the raw headers
// of a message an adapter could not decode, as JSON (where the broker has
// headers and there were any); the dead letter keeps it.
const KeyDecodeHeaders = "surely_decode_headers"

// MaxHistoryBytes bounds the JSON of KeyHistory: oldest entries, then
// stacks of all but the newest entry, are dropped to fit.
const MaxHistoryBytes = 16 << 10

// RedactorPanicked replaces a text that a redactor panicked on: a text
// that could not be redacted is never written.
const RedactorPanicked = "[text withheld: the redactor panicked]"

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

// ErrorTypes lists the Go types of err's chain, outermost first, separated
// by " > "; the branches of a join are listed in brackets. At most 16 types.
func ErrorTypes(err error) string {
	budget := 16
	return errorTypes(err, &budget)
}

func errorTypes(err error, budget *int) string {
	var parts []string
	for err != nil && *budget > 0 {
		*budget--
		t := fmt.Sprintf("%T", err)
		switch u := err.(type) { //nolint:errorlint // walking the chain one link at a time is the point
		case interface{ Unwrap() []error }:
			var branches []string
			for _, e := range u.Unwrap() {
				branches = append(branches, errorTypes(e, budget))
			}
			return strings.Join(append(parts, t+"["+strings.Join(branches, ", ")+"]"), " > ")
		case interface{ Unwrap() error }:
			parts = append(parts, t)
			err = u.Unwrap()
		default:
			parts = append(parts, t)
			err = nil
		}
	}
	return strings.Join(parts, " > ")
}

// RootErrorType returns the innermost type of an error type chain as
// written to KeyErrorTypes ("*fmt.wrapError > *net.OpError" gives
// "*net.OpError"): the root cause. A chain that ends in a join keeps the
// join with its bracketed branches. Empty in, empty out.
func RootErrorType(types string) string {
	depth, last := 0, 0
	for i := 0; i < len(types); i++ {
		switch types[i] {
		case '[':
			depth++
		case ']':
			depth--
		case '>':
			if depth == 0 && i > 0 && types[i-1] == ' ' && i+1 < len(types) && types[i+1] == ' ' {
				last = i + 2
			}
		}
	}
	return strings.TrimSpace(types[last:])
}
