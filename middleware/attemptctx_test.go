package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type attemptKey struct{}

var errShutdown = errors.New("shutdown")

// msgCtx is a message context with a value, a deadline and a cause.
func msgCtx(t *testing.T) (context.Context, context.CancelCauseFunc, time.Time) {
	deadline := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx, cancelDeadline := context.WithDeadline(context.WithValue(context.Background(), attemptKey{}, "v"), deadline)
	t.Cleanup(cancelDeadline)
	ctx, cancel := context.WithCancelCause(ctx)
	t.Cleanup(func() { cancel(nil) })
	return ctx, cancel, deadline
}

func requireLive(t *testing.T, ctx context.Context) {
	t.Helper()
	require.NoError(t, ctx.Err())
	require.NoError(t, context.Cause(ctx))
	select {
	case <-ctx.Done():
		t.Fatal("done")
	default:
	}
}

func requireCanceled(t *testing.T, ctx context.Context, cause error) {
	t.Helper()
	<-ctx.Done()
	require.Equal(t, context.Canceled, ctx.Err())
	require.Equal(t, cause, context.Cause(ctx))
}

// otherKey is a context key of another package's, for a derived context.
type otherKey struct{}

func TestAttemptCtxValuesAndDeadline(t *testing.T) {
	t.Parallel()
	mctx, _, deadline := msgCtx(t)
	a := newAttemptCtx(mctx)
	for _, ctx := range []context.Context{a, context.WithValue(a, otherKey{}, 1)} {
		require.Equal(t, "v", ctx.Value(attemptKey{}))
		got, ok := ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, deadline, got)
	}
	requireLive(t, a)
	// Made (by Done): the same values and deadline.
	require.Equal(t, "v", a.Value(attemptKey{}))
	got, ok := a.Deadline()
	require.True(t, ok)
	require.Equal(t, deadline, got)
	a.stop()
	requireLive(t, a)
}

func TestAttemptCtxHung(t *testing.T) {
	t.Parallel()
	mctx, _, _ := msgCtx(t)
	a := newAttemptCtx(mctx)
	child, cancelChild := context.WithCancel(context.WithValue(a, otherKey{}, 1))
	defer cancelChild()
	a.hang(ErrHandlerHung)
	// Canceled at once: the child is registered with a standard cancelCtx,
	// not watched by a goroutine.
	require.Equal(t, context.Canceled, child.Err())
	require.Equal(t, ErrHandlerHung, context.Cause(child))
	requireCanceled(t, a, ErrHandlerHung)
	a.stop()
	requireCanceled(t, a, ErrHandlerHung)
	require.Equal(t, ErrHandlerHung, a.cause())
	require.NoError(t, mctx.Err(), "the message context is not canceled")
}

func TestAttemptCtxHungWithoutWaiting(t *testing.T) {
	t.Parallel()
	mctx, _, _ := msgCtx(t)
	a := newAttemptCtx(mctx)
	a.hang(ErrHandlerHung)
	require.Equal(t, context.Canceled, a.Err())
	require.Equal(t, ErrHandlerHung, context.Cause(a))
	requireCanceled(t, a, ErrHandlerHung)
}

func TestAttemptCtxFollowsTheMessageWhileRunning(t *testing.T) {
	t.Parallel()
	t.Run("not waited on", func(t *testing.T) {
		t.Parallel()
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		cancel(errShutdown)
		require.Equal(t, context.Canceled, a.Err())
		require.Equal(t, errShutdown, context.Cause(a))
		a.hang(ErrHandlerHung)
		requireCanceled(t, a, errShutdown)
		a.stop()
		requireCanceled(t, a, errShutdown)
		require.Equal(t, errShutdown, a.cause())
	})
	t.Run("waited on", func(t *testing.T) {
		t.Parallel()
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		child, cancelChild := context.WithCancel(a)
		defer cancelChild()
		done := a.Done()
		cancel(errShutdown)
		<-done
		requireCanceled(t, a, errShutdown)
		requireCanceled(t, child, errShutdown)
		a.stop()
		requireCanceled(t, a, errShutdown)
	})
	t.Run("canceled before stop, never looked at", func(t *testing.T) {
		t.Parallel()
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		cancel(errShutdown)
		a.stop()
		requireCanceled(t, a, errShutdown)
	})
	t.Run("canceled just before stop, waited on", func(t *testing.T) {
		t.Parallel()
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		_ = a.Done()
		cancel(errShutdown)
		a.stop()
		// Without waiting for the forwarding goroutine.
		require.Equal(t, context.Canceled, a.Err())
		require.Equal(t, errShutdown, context.Cause(a))
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		mctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		a := newAttemptCtx(mctx)
		requireCanceled(t, a, context.DeadlineExceeded)
	})
}

func TestAttemptCtxOutlivesTheAttempt(t *testing.T) {
	t.Parallel()
	t.Run("not waited on", func(t *testing.T) {
		t.Parallel()
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		require.NoError(t, a.Err())
		a.stop()
		cancel(errShutdown)
		requireLive(t, a)
		require.Nil(t, a.Done(), "never canceled now")
		child, cancelChild := context.WithCancel(a)
		defer cancelChild()
		requireLive(t, child)
		require.Equal(t, "v", child.Value(attemptKey{}))
		require.NoError(t, a.cause())
	})
	t.Run("waited on", func(t *testing.T) {
		t.Parallel()
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		child, cancelChild := context.WithCancel(a)
		defer cancelChild()
		a.stop()
		cancel(errShutdown)
		requireLive(t, a)
		requireLive(t, child)
	})
}

// TestAttemptCtxDerivedStartsNoGoroutine: contexts derived from the
// handler's context find a standard cancelCtx (the stdlib starts a
// goroutine per derived context otherwise, and cancels it
// asynchronously).
func TestAttemptCtxDerivedStartsNoGoroutine(t *testing.T) {
	t.Parallel()
	mctx, _, _ := msgCtx(t)
	a := newAttemptCtx(mctx)
	var cancels []context.CancelFunc
	ctx := context.Context(a)
	for range 3 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Hour) //nolint:fatcontext // a chain of derived contexts is the point
		cancels = append(cancels, cancel)
	}
	stop := context.AfterFunc(a, func() {})
	a.hang(ErrHandlerHung)
	// All canceled synchronously by hang: registered, not watched.
	require.Equal(t, context.Canceled, ctx.Err())
	require.Equal(t, ErrHandlerHung, context.Cause(ctx))
	require.False(t, stop(), "the AfterFunc ran")
	for _, c := range cancels {
		c()
	}
	a.stop()
}

func TestAttemptCtxConcurrent(t *testing.T) {
	t.Parallel()
	for i := range 200 {
		mctx, cancel, _ := msgCtx(t)
		a := newAttemptCtx(mctx)
		var wg sync.WaitGroup
		for j := range 3 {
			wg.Go(func() {
				switch j {
				case 0:
					_ = a.Done()
				case 1:
					_ = a.Err()
				case 2:
					_ = context.Cause(a)
				}
				_ = a.Value(attemptKey{})
			})
		}
		wg.Go(func() {
			if i%2 == 0 {
				cancel(errShutdown)
			} else {
				a.hang(ErrHandlerHung)
			}
		})
		wg.Wait()
		a.stop()
		// Canceled before stop (either way): canceled after it, with the
		// first cause.
		require.Equal(t, context.Canceled, a.Err())
		if i%2 == 0 {
			require.Equal(t, errShutdown, context.Cause(a))
		} else {
			require.Equal(t, ErrHandlerHung, context.Cause(a))
		}
		// A late cancellation of the message context changes nothing.
		cancel(errors.New("late"))
		require.NotEqual(t, "late", context.Cause(a).Error())
	}
}

// TestAttemptCtxAllocs: a handler that does not wait on its context costs
// one allocation for it.
func TestAttemptCtxAllocs(t *testing.T) {
	mctx, _, _ := msgCtx(t)
	allocs := testing.AllocsPerRun(100, func() {
		a := newAttemptCtx(mctx)
		_ = a.Value(attemptKey{})
		_ = a.Err()
		_, _ = a.Deadline()
		a.stop()
		_ = a.cause()
	})
	require.Equal(t, 1.0, allocs)
}
