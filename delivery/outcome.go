package delivery

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
)

// Outcome is how one delivery of a message ended in surely's chain
// (OutcomeParams.Outcome): the metric label, the log line, the span's
// surely.outcome. handler.New and the middleware steps report it to an
// outcome callback (handler.WithOnOutcome, middleware.WithOnOutcome).
type Outcome string

// The outcomes of a delivery.
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
	// OutcomePaused: the outage breaker is open; nacked with a delay, no
	// attempt spent.
	OutcomePaused Outcome = "paused"
	// OutcomeLeaseLost: the attempt's lease was taken over before Complete
	// (Complete, Release or an extension was refused by fencing); nacked.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeCanceled: the message context was canceled (shutdown); nacked.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeProcessedWithoutDedup: a message without a key, under
	// ProcessWithoutDedup, that the handler processed with no dedup record;
	// acked. Nothing stops another delivery of it from running again.
	OutcomeProcessedWithoutDedup Outcome = "processed_without_dedup"
)

// OutcomeParams describes one delivery's end, for an outcome callback.
type OutcomeParams struct {
	// Msg is the message.
	Msg *message.Message
	// Outcome is how the delivery ended.
	Outcome Outcome
	// Attempts is how many attempts ran in this delivery (0 for a paused one).
	Attempts int
	// Attempt is the durable attempt number of the last attempt (0 if no claim).
	Attempt int
	// Key and Namespace identify the operation, as the identity step
	// extracted it (empty when the message had none, or could not be
	// decoded): the same key the handler got from idempotency.KeyFrom.
	Key, Namespace string
	// Previous is how the attempt before the last one ended, as its claim
	// reported ("" when no claim was acquired).
	Previous idempotency.AttemptResult
	// Reason is the dead-letter reason (a dlq.Reason), for
	// OutcomeDeadLettered.
	Reason string
	// Cause is the failure that was dead-lettered, as the dead letter's
	// error (dlq.KeyError) records it before redaction, for
	// OutcomeDeadLettered (Err is nil then: the message was acked).
	Cause error
	// Err is what the chain returned (nil when it acked).
	Err error
	// Duration is the time the delivery spent in the chain.
	Duration time.Duration
}

// OutcomeResult is what an outcome callback returns; empty for now, it
// leaves room to grow.
type OutcomeResult struct{}

// MissingKeyPolicy says what surely's chain does with a message without an
// operation key (handler.WithIdentity, middleware.Identity).
type MissingKeyPolicy int

// The missing-key policies.
const (
	// RejectMissingKey dead-letters a message without a key (reason
	// no_key). It is the default: a message that cannot be deduplicated is
	// not processed silently.
	RejectMissingKey MissingKeyPolicy = iota
	// ProcessWithoutDedup runs the handler without a dedup record when the
	// key is missing (OutcomeProcessedWithoutDedup): nothing is ever
	// skipped as a duplicate, so another message with the same payload, or
	// the same UUID, or a redelivery of one that succeeded (its ack was
	// lost), runs the effect again. Invalid keys (too long, control
	// characters) are still rejected. The attempts stay bounded (see
	// middleware.Dedup): only attempts that ran the handler are charged, to
	// an attempt record under the message UUID in the reserved namespace
	// "surely.keyless"; a delivery the broker numbers as the first (a
	// delivery count of 1) runs without a store call, so a message that
	// succeeds at once costs nothing durable there. A message that keeps
	// failing is dead-lettered (reason exhausted, or panic) after the
	// budget. A success closes the record uncharged, never as done.
	ProcessWithoutDedup
)
