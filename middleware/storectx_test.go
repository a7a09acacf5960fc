package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A store call's context ends at its deadline whether the store waits on
// Done or only checks Err, and with its parent unless detached.
func TestBoundedCtx(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), attemptKey{}, "v"))
		defer cancel(nil)

		polled := newBoundedCtx(parent, time.Second)
		dl, ok := polled.Deadline()
		require.True(t, ok)
		require.Equal(t, time.Now().Add(time.Second), dl)
		require.Equal(t, "v", polled.Value(attemptKey{}))
		require.NoError(t, polled.Err())
		time.Sleep(time.Second)
		require.ErrorIs(t, polled.Err(), context.DeadlineExceeded, "Err alone sees the deadline")
		polled.stop()

		waited := newBoundedCtx(parent, time.Second)
		start := time.Now()
		<-waited.Done()
		require.Equal(t, time.Second, time.Since(start))
		require.ErrorIs(t, waited.Err(), context.DeadlineExceeded)
		require.ErrorIs(t, context.Cause(waited), context.DeadlineExceeded)
		derived, cancelDerived := context.WithCancel(waited)
		<-derived.Done()
		cancelDerived()
		waited.stop()

		shorter, cancelShorter := context.WithTimeout(parent, time.Millisecond)
		require.Equal(t, time.Now().Add(time.Millisecond), must(newBoundedCtx(shorter, time.Second).Deadline()), "the parent's earlier deadline")
		cancelShorter()

		detached := newBoundedCtx(context.WithoutCancel(parent), time.Hour)
		attached := newBoundedCtx(parent, time.Hour)
		done := attached.Done()
		errStop := errors.New("shutdown")
		cancel(errStop)
		<-done
		require.ErrorIs(t, attached.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(attached), errStop)
		require.NoError(t, detached.Err(), "a detached call outlives its message")
		select {
		case <-detached.Done():
			t.Fatal("detached context canceled by its parent")
		default:
		}
		require.Equal(t, "v", detached.Value(attemptKey{}))
		detached.stop()
		attached.stop()
	})
}

func must(t time.Time, _ bool) time.Time { return t }

// A store call gets the lazy context until one call waits on Done; from
// then on a plain context.WithDeadline (the standard *timerCtx), with the
// same deadline, values and cancellation.
func TestBoundCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), attemptKey{}, "v"))
		defer cancel()
		var waits atomic.Bool

		polled := boundCall(parent, time.Second, &waits)
		require.IsType(t, &boundedCtx{}, polled.ctx)
		require.NoError(t, polled.ctx.Err())
		polled.stop()
		require.False(t, waits.Load(), "Err alone is no wait")

		first := boundCall(parent, time.Second, &waits)
		require.IsType(t, &boundedCtx{}, first.ctx)
		done := first.ctx.Done()
		require.True(t, waits.Load(), "Done is a wait")
		first.stop()
		<-done
		require.ErrorIs(t, first.ctx.Err(), context.Canceled, "stop releases the made context")

		plain := boundCall(parent, time.Second, &waits)
		require.NotNil(t, plain.cancel, "a plain context.WithDeadline once a call waited")
		require.Equal(t, time.Now().Add(time.Second), must(plain.ctx.Deadline()))
		require.Equal(t, "v", plain.ctx.Value(attemptKey{}))
		start := time.Now()
		<-plain.ctx.Done()
		require.Equal(t, time.Second, time.Since(start))
		require.ErrorIs(t, plain.ctx.Err(), context.DeadlineExceeded)
		plain.stop()

		attached := boundCall(parent, time.Hour, &waits)
		detached := boundCall(context.WithoutCancel(parent), time.Hour, &waits)
		cancel()
		<-attached.ctx.Done()
		require.ErrorIs(t, attached.ctx.Err(), context.Canceled)
		require.NoError(t, detached.ctx.Err(), "a detached call outlives its message")
		attached.stop()
		detached.stop()
	})
}
