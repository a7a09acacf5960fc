package middleware

import (
	"context"
	"errors"
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
