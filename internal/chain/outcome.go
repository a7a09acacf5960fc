// Package chain holds what the steps of surely's chain (package
// middleware) share with package handler, which assembles them, and with
// surely's own tests: the outcome of a delivery and its callback's types,
// the missing-key policies, the reserved keyless namespace, and the names
// of the metrics, span attributes and links (the defaults are in
// internal/defaults).
//
// A user never imports it. The outcome types and policies are exported
// by package handler (handler.Outcome, handler.OutcomeParams, ...), which
// documents them; middleware's options take them, so a user of middleware
// names them as handler.X too. Each telemetry name is documented where the
// telemetry is (README's "Observability", middleware.WithMeterProvider and
// middleware.Trace).
package chain

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
)

// Outcome is how one delivery of a message ended in the chain
// (handler.Outcome).
type Outcome string

// The outcomes (handler.Outcome* documents each).
const (
	OutcomeProcessed        Outcome = "processed"
	OutcomeDuplicate        Outcome = "duplicate"
	OutcomeInProgress       Outcome = "in_progress"
	OutcomeRetry            Outcome = "retry"
	OutcomeDeadLettered     Outcome = "dead_lettered"
	OutcomeDeadLetterFailed Outcome = "dead_letter_failed"
	OutcomePaused           Outcome = "paused"
	OutcomeLeaseLost        Outcome = "lease_lost"
	OutcomeCanceled         Outcome = "canceled"
	OutcomeUnprocessed      Outcome = "processed_without_dedup"
)

// OutcomeParams describes one delivery's end, for an outcome callback
// (handler.OutcomeParams documents each field).
type OutcomeParams struct {
	Msg     *message.Message
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
	// Reason is the dead-letter reason, for OutcomeDeadLettered.
	Reason string
	// Cause is the failure that was dead-lettered, as the dead letter's
	// error records it (before redaction), for OutcomeDeadLettered (Err is
	// nil then: the message was acked).
	Cause error
	// Err is what the chain returned (nil when it acked).
	Err      error
	Duration time.Duration
}

// OutcomeResult is what an outcome callback returns; empty for now, it
// leaves room to grow.
type OutcomeResult struct{}

// MissingKeyPolicy says what happens to a message without an operation
// key (handler.MissingKeyPolicy).
type MissingKeyPolicy int

// The missing-key policies (handler.RejectMissingKey and
// handler.ProcessWithoutDedup document them).
const (
	RejectMissingKey MissingKeyPolicy = iota
	ProcessWithoutDedup
)
