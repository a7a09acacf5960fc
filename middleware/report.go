package middleware

import (
	"context"
	"time"

	"github.com/surely-dev/surely/idempotency"
)

// Outcome is how one delivery of a message ended in the surely chain.
type Outcome string

// Outcomes reported by Observe.
const (
	// OutcomeProcessed: the handler ran and its effect is committed; ack.
	OutcomeProcessed Outcome = "processed"
	// OutcomeDuplicate: the operation was already done; its produced
	// messages were re-emitted and the message acked without running.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeInProgress: another owner holds a live lease; nacked with a delay.
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeRetry: the delivery failed transiently; nacked for a later attempt.
	OutcomeRetry Outcome = "retry"
	// OutcomeDeadLettered: published to the dead letter, then acked.
	OutcomeDeadLettered Outcome = "dead_lettered"
	// OutcomeDeadLetterFailed: the dead-letter publish failed; nacked.
	OutcomeDeadLetterFailed Outcome = "dead_letter_failed"
	// OutcomePaused: the outage breaker is open; nacked with a delay, no attempt spent.
	OutcomePaused Outcome = "paused"
	// OutcomeLeaseLost: the attempt's lease was taken over before Complete; nacked.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeCanceled: the message context was canceled (shutdown); nacked.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeUnprocessed: processed without dedup (no key, explicit opt-in).
	OutcomeUnprocessed Outcome = "processed_without_dedup"
)

// report is shared by the steps of one delivery through the message context.
// Observe installs it; the inner steps fill it. Steps used without Observe
// find none and skip reporting.
type report struct {
	// op is the operation slot Identity fills, saving it an allocation.
	op       idempotency.Operation
	outcome  Outcome
	attempts int // attempts run in this delivery
	attempt  int // durable attempt number of the last one
	reason   string
	started  time.Time
}

type reportKey struct{}

func reportFrom(ctx context.Context) *report {
	r, _ := ctx.Value(reportKey{}).(*report)
	return r
}

func setOutcome(ctx context.Context, o Outcome) {
	if r := reportFrom(ctx); r != nil {
		r.outcome = o
	}
}
