package middleware

import (
	"context"
	"errors"
	"testing"
)

// Once the context was made (something called Done), Err must report the
// message context's cancellation at once, not after the goroutine that
// forwards it ran: a handler that reads Err right after a shutdown began
// must see it, or its error wraps no cancellation and a permanent one is
// dead-lettered instead of nacked.
func TestAttemptCtxErrSeesCancellationAtOnce(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutdown")
	for i := range 2000 {
		msg, cancel := context.WithCancelCause(context.Background())
		a := newAttemptCtx(msg)
		_ = a.Done() // made, forwarding through context.AfterFunc
		cancel(cause)
		if err := a.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: Err = %v right after the message context was canceled", i, err)
		}
		if got := context.Cause(a); !errors.Is(got, cause) {
			t.Fatalf("run %d: Cause = %v, want %v", i, got, cause)
		}
		a.stop()
	}
}
