package middleware

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
)

var (
	// ErrInvalidOption wraps every option error of this package.
	ErrInvalidOption = errors.New("middleware: invalid option")
	// ErrStoreUnavailable wraps a store error (outage, timeout): the
	// message is nacked and no attempt is charged.
	ErrStoreUnavailable = errors.New("surely: idempotency store unavailable")
	// ErrConflict means the operation key was first seen with another payload.
	ErrConflict = errors.New("surely: operation key reused with a different payload")
	// ErrExhausted means the durable attempt budget is spent.
	ErrExhausted = errors.New("surely: attempt budget exhausted")
	// ErrUndecodable means a broker adapter could not decode the message
	// (delivery.KeyDecodeError); it is dead-lettered with its raw bytes.
	ErrUndecodable = errors.New("surely: message could not be decoded")
	// ErrHandlerHung is the cause of the handler context's cancellation when
	// an attempt outlived the longest lease hold (see WithLease), and wraps
	// the attempt's error: a charged failure, retried, then dead-lettered.
	ErrHandlerHung = errors.New("surely: handler exceeded the longest lease hold")
	// ErrPaused means the outage breaker held the message back without an attempt.
	ErrPaused = errors.New("surely: paused by the outage breaker")
)

// InProgressError is returned when another owner holds a live lease on the
// operation, or when the delay the last attempt asked for (retry.After) has
// not passed. It is not a failure of the message: nack it with a delay.
type InProgressError struct {
	Key string
	// Until is when the lease or the delay ends, by the store's clock.
	Until time.Time
	// Wait is how long until a claim can succeed, as the store measured
	// it (idempotency.ClaimResult.Wait); 0 when the store did not say.
	Wait time.Duration
}

// wait is how long to wait before a redelivery: Wait, or, from a store
// that does not report it, Until on this process's clock.
func (e *InProgressError) wait() time.Duration {
	if e.Wait > 0 {
		return e.Wait
	}
	return time.Until(e.Until)
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("surely: operation %q is in progress elsewhere until %s", e.Key, e.Until.Format(time.RFC3339Nano))
}

// LeaseLostError is returned when Complete, Release or a lease extension
// found the lease taken over (a refused extension cancels the handler's
// context at once, with cause idempotency.ErrLeaseLost): the effect may
// have run twice; the new owner decides the record, so not even a
// permanent error of the stale attempt dead-letters the message. Nack.
type LeaseLostError struct {
	Key string
	Err error
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("surely: lease on %q lost before complete: %v", e.Key, e.Err)
}

func (e *LeaseLostError) Unwrap() error { return e.Err }

// PanicError is a recovered panic of the handler, or of a callback the
// chain calls around it (Where names it: "key source"; empty for the
// handler).
type PanicError struct {
	Value any
	Stack string
	Where string
}

func (e *PanicError) Error() string {
	where := e.Where
	if where == "" {
		where = "handler"
	}
	return fmt.Sprintf("surely: %s panicked: %v", where, e.Value)
}

// recovered turns a recovered panic value into a *PanicError, or nil.
func recovered(v any, where string) *PanicError {
	if v == nil {
		return nil
	}
	return &PanicError{Value: v, Stack: idem.Truncate(string(debug.Stack()), defaults.MaxStackLen), Where: where}
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// PanicStack returns Stack, "" for a nil e. A dead letter's call site
// (surely_error_site, dlq's package doc) is read from the stack of the
// first error in its chain that has a PanicStack method, before any other
// stack: package dlq finds a *PanicError by this method, without naming
// the type.
func (e *PanicError) PanicStack() string {
	if e == nil {
		return ""
	}
	return e.Stack
}
