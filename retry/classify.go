package retry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// permanentError marks an error as not worth retrying: the same message
// will fail the same way however often it is tried (a validation error, a
// payload that cannot be decoded). [Permanent] makes it; [IsPermanent]
// detects it.
type permanentError struct {
	Err error
}

// Error returns the text of the wrapped error unchanged: the classification
// lives in the type, not in the text.
func (e *permanentError) Error() string {
	if e == nil || e.Err == nil {
		return "retry: permanent error"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error, so errors.Is and errors.As see through it.
func (e *permanentError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Permanent marks err as not worth retrying. It returns nil for a nil err,
// so `return retry.Permanent(err)` is safe on every path.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*permanentError); ok { //nolint:errorlint // only the outermost error: a wrapped mark is wrapped again on purpose
		return err // already marked at the top: do not wrap twice
	}
	return &permanentError{Err: err}
}

// IsPermanent reports whether err, or any error it wraps or joins, was
// marked with [Permanent].
func IsPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}

// afterError is a transient error that carries the earliest time to retry,
// relative to the failure: typically a dependency's Retry-After header or
// a rate limiter's reset time. [After] makes it; [AfterDelay] reads it.
type afterError struct {
	// Delay is the minimum wait before the next attempt. A negative Delay is
	// read as 0.
	Delay time.Duration
	Err   error
}

// Error returns the text of the wrapped error followed by the delay.
func (e *afterError) Error() string {
	if e == nil {
		return "retry: retry after"
	}
	if e.Err == nil {
		return fmt.Sprintf("retry after %v", e.Delay)
	}
	return fmt.Sprintf("%v (retry after %v)", e.Err, e.Delay)
}

// Unwrap returns the wrapped error, so errors.Is and errors.As see through it.
func (e *afterError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// After marks err as transient and asks for the next attempt no earlier than
// d from now. It returns nil for a nil err. A negative d is stored as 0.
// The retry is never sooner than the policy's backoff would make it
// ([Policy.Delay]): After(0) is an ordinary transient error, not a request
// to retry at once.
//
// [Permanent] wins over After: an error marked with both is not retried.
func After(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &afterError{Delay: max(d, 0), Err: err}
}

// AfterDelay returns the delay asked for with [After] by err, or by the first
// such error found in its tree (errors.As order), and whether there was one.
// The delay is never negative.
func AfterDelay(err error) (time.Duration, bool) {
	var ae *afterError
	if !errors.As(err, &ae) {
		return 0, false
	}
	return max(ae.Delay, 0), true
}

// isCanceled reports whether err is a shutdown rather than a failure of the
// message: err is (or wraps) context.Canceled or context.DeadlineExceeded AND
// ctx itself is done (see [Classify]).
func isCanceled(ctx context.Context, err error) bool {
	if ctx == nil || ctx.Err() == nil {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Class is the retry decision for an error.
type Class int

const (
	// ClassTransient means worth retrying, with backoff (or the delay of [After]).
	ClassTransient Class = iota
	// ClassPermanent means not worth retrying; dead-letter now.
	ClassPermanent
	// ClassCanceled means the consumer is shutting down. Neither a success nor a
	// failure of the message: spend no attempt, nack so another consumer (or
	// this one, restarted) gets it.
	ClassCanceled
)

// String returns "transient", "permanent" or "canceled".
func (c Class) String() string {
	return enumString("Class", int(c), "transient", "permanent", "canceled")
}

// Classify decides what to do with a failed attempt, in this order:
//
//  1. err is (or wraps) context.Canceled or context.DeadlineExceeded and
//     ctx itself is done: [ClassCanceled] (a shutdown beats everything,
//     even an error marked permanent, because the message is not at fault);
//  2. [IsPermanent]: [ClassPermanent];
//  3. otherwise: [ClassTransient], including errors marked with [After] and
//     errors nobody classified (unknown errors are retried, within budget).
//
// Classify is meant for non-nil errors; a nil err yields ClassTransient, the
// zero Class.
//
// Pass the context of the delivery (the message context), not a per-attempt
// context derived from it: an attempt that hit its own timeout while the
// delivery context is still live is a transient failure, not a cancellation.
func Classify(ctx context.Context, err error) Class {
	switch {
	case err == nil:
		return ClassTransient
	case isCanceled(ctx, err):
		return ClassCanceled
	case IsPermanent(err):
		return ClassPermanent
	default:
		return ClassTransient
	}
}
