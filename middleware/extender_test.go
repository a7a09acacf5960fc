package middleware

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// extendStore answers Extend with what the test sends on answers, after
// telling it the call arrived.
type extendStore struct {
	idempotency.Store
	entered chan idempotency.Lease
	answers chan error
}

func (s *extendStore) Extend(_ context.Context, l idempotency.Lease, _ time.Duration) (idempotency.Lease, error) {
	s.entered <- l
	err := <-s.answers
	l.Token = "late-" + l.Token
	return l, err
}

// An extension that answers after its attempt ended, once the extender
// runs for the next attempt, changes nothing of that attempt: neither its
// lease nor its handler's context. stop does not wait for it.
func TestExtenderIgnoresALateAnswerAfterReuse(t *testing.T) {
	t.Parallel()
	for _, answer := range []error{nil, idempotency.ErrLeaseLost} {
		t.Run(errName(answer), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				store := &extendStore{entered: make(chan idempotency.Lease), answers: make(chan error)}
				d := &dedup{store: store, cfg: dedupConfig{
					lease: 30 * time.Second, extendEvery: 10 * time.Second, maxHeld: time.Hour,
					storeTimeout: 5 * time.Second, logger: slog.New(slog.DiscardHandler),
				}}
				ctx := t.Context()
				first := newAttemptCtx(ctx)
				e := d.startExtender(ctx, idempotency.Lease{Token: "first"}, first)
				require.Equal(t, "first", (<-store.entered).Token, "the first attempt's extension is in flight")
				require.Equal(t, "first", e.stop().Token, "stop does not wait for it")
				first.stop()

				second := newAttemptCtx(ctx)
				e.arm(ctx, idempotency.Lease{Token: "second"}, second)
				store.answers <- answer
				synctest.Wait()
				require.NoError(t, second.cause(), "the late answer did not cancel the next attempt")
				require.Equal(t, "second", e.stop().Token, "the late answer did not replace the next attempt's lease")
				second.stop()
			})
		})
	}
}

func errName(err error) string {
	if err == nil {
		return "extended"
	}
	return "lease lost"
}
