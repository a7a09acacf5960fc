package dlq

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/surely-dev/surely/idempotency"
)

// Version is the envelope version written to KeyVersion.
const Version = "1"

// Reason says why a message was dead-lettered.
type Reason string

// Reasons written to KeyReason.
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
	// ErrorTypes overrides the type chain written to KeyErrorTypes, for an
	// error known only as text (the last attempt of an exhausted budget, as
	// recorded by the store); empty: ErrorTypes(Err).
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
