// Package envelope holds what dlq, its archives, replay, the middleware
// and cmd/surely share of the dead-letter envelope's format besides its
// keys (which are package dlq's constants, listed in its doc): the
// envelope version, the derived dead-letter UUID, and the helpers that
// write and read the error type chain and the attempt history. Users read
// an envelope through dlq.ParseEnvelope.
package envelope

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/surely-dev/surely/idempotency"
)

// Version is the envelope version written to dlq.KeyVersion.
const Version = "1"

// MaxHistoryBytes bounds the JSON of dlq.KeyHistory: oldest entries, then
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

// DeadLetterID is the UUID of the dead letter of the message with UUID
// original: DeadLetterUUID of it, or, for a message republished by a
// replay run (replayRun, its dlq.KeyReplayID, not empty), of its UUID and
// the run's ID. A replayed message that fails again is then a new archive
// entry carrying the run's ID, not a copy of the entry it replays, so the
// run can see its re-failures.
func DeadLetterID(original, replayRun string) string {
	if replayRun != "" {
		return DeadLetterUUID(original + "\x00replay:" + replayRun)
	}
	return DeadLetterUUID(original)
}

// ParseHistory decodes the attempt history of a dead-lettered message,
// the text of its dlq.KeyHistory ("": none).
func ParseHistory(text string) ([]idempotency.AttemptRecord, error) {
	if text == "" {
		return nil, nil
	}
	var h []idempotency.AttemptRecord
	if err := json.Unmarshal([]byte(text), &h); err != nil {
		return nil, err
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
// written to dlq.KeyErrorTypes ("*fmt.wrapError > *net.OpError" gives
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
