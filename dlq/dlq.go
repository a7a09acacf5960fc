package dlq

import (
	"errors"
	"fmt"
	"time"

	"github.com/surely-dev/surely/idempotency"
)

// Reason says why a message was dead-lettered.
type Reason string

// Reasons written to KeyReason (Envelope.Reason).
const (
	// ReasonExhausted: the durable attempt budget is spent.
	ReasonExhausted Reason = "exhausted"
	// ReasonPermanent: the handler returned retry.Permanent.
	ReasonPermanent Reason = "permanent"
	// ReasonConflict: the operation key was first seen with another payload.
	ReasonConflict Reason = "conflict"
	// ReasonNoKey: no usable operation key (missing, too long, control bytes).
	ReasonNoKey Reason = "no_key"
	// ReasonLeaseLost: reserved for a final attempt that lost its lease. The
	// middleware nacks on a lost lease (the new owner decides), so this
	// reason appears only from callers that choose otherwise.
	ReasonLeaseLost Reason = "lease_lost"
	// ReasonPanic: the budget is spent and the last attempt panicked.
	ReasonPanic Reason = "panic"
	// ReasonDecode: the message could not be decoded (payload or headers).
	ReasonDecode Reason = "decode"
)

// FinalError is a failure that must not be retried: the dead-letter step
// publishes the message with its context and then acks it. It wraps the
// cause; errors.Is and errors.As see through it.
type FinalError struct {
	Reason Reason
	Err    error
	// Attempts and History are the durable attempt count and per-attempt
	// ledger, when a store knows them.
	Attempts int
	History  []idempotency.AttemptRecord
	// OperationKey and Fingerprint of the message, when known.
	OperationKey, Fingerprint string
	// Namespace and Retention of the handler's dedup records, when known.
	Namespace string
	Retention time.Duration
	// ErrorTypes overrides the type chain written to the envelope
	// (Envelope.ErrorTypes), for an error known only as text (the last
	// attempt of an exhausted budget, as recorded by the store); empty: the
	// types of Err's chain.
	ErrorTypes string
}

// Final marks err as final with reason. A nil err still yields an error.
func Final(reason Reason, err error) *FinalError {
	if err == nil {
		err = errors.New(string(reason))
	}
	return &FinalError{Reason: reason, Err: err}
}

func (e *FinalError) Error() string {
	return fmt.Sprintf("final (%s): %v", e.Reason, e.Err)
}

func (e *FinalError) Unwrap() error { return e.Err }

// AsFinal finds a FinalError in err's chain.
func AsFinal(err error) (*FinalError, bool) {
	var fe *FinalError
	ok := errors.As(err, &fe)
	return fe, ok
}
