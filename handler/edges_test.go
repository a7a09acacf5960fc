package handler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// Guarantees that must hold at every edge of the chain: a shutdown, a
// final error the handler makes itself, what the outcome callback sees.

// TestDeadLetterShutdownBeatsPermanent: a handler that returns
// retry.Permanent(ctx.Err()) because the consumer is shutting down is not
// at fault. The dead-letter step agrees with the dedup step (which
// releases the claim as canceled): no dead letter, a nack, no attempt
// charged, outcome canceled.
func TestDeadLetterShutdownBeatsPermanent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  func(ctx context.Context) error
	}{
		{"permanent ctx.Err", func(ctx context.Context) error { return retry.Permanent(ctx.Err()) }},
		{"final ctx.Err", func(ctx context.Context) error { return dlq.Final(dlq.ReasonPermanent, ctx.Err()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				ctx, shutdown := context.WithCancel(t.Context())
				h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
					shutdown() // the router closes while the handler runs
					<-msg.Context().Done()
					return nil, tc.err(msg.Context())
				})
				src := delivery("order-1", "pay 10")
				src.SetContext(ctx)
				_, err := h(src)
				require.Error(t, err, "a shutdown is nacked, not acked")
				require.ErrorIs(t, err, context.Canceled)
				require.Empty(t, e.dead.Published(deadTopic), "no dead letter for a shutdown")
				rec, err := e.mem.Get(t.Context(), "orders", "order-1")
				require.NoError(t, err)
				require.Equal(t, idempotency.StateFailed, rec.State)
				require.Equal(t, 0, rec.Attempts-rec.Canceled, "no attempt charged")
				require.EqualValues(t, 1, e.count(handler.OutcomeCanceled))
				require.EqualValues(t, 0, e.count(handler.OutcomeDeadLettered))
			})
		})
	}
}

// TestHandlerFinalErrorLeavesTheRecordFinal: a handler that returns a
// *dlq.FinalError itself is dead-lettered with its reason, and its record
// is left EXHAUSTED, so a duplicate delivery is dead-lettered again
// without running the handler.
func TestHandlerFinalErrorLeavesTheRecordFinal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, dlq.Final(dlq.ReasonDecode, errors.New("schema v3 unknown"))
		})
		_, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err, "acked after the dead letter")
		rec, err := e.mem.Get(t.Context(), "orders", "order-1")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateExhausted, rec.State, "a final dead letter leaves the record final")

		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load(), "a duplicate does not run the handler again")
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 2)
		for _, d := range dead {
			require.Equal(t, string(dlq.ReasonDecode), d.Metadata.Get(dlq.KeyReason), "the handler's reason is kept")
			require.Equal(t, "1", d.Metadata.Get(dlq.KeyAttempts))
			require.Equal(t, "order-1", d.Metadata.Get(dlq.KeyOperationKey))
		}
	})
}

// TestOutcomeParamsCarryTheOperation: the OnOutcome callback gets the
// operation (key, namespace, attempt, how the previous attempt ended) as
// fields, including with a custom extractor, where re-reading the metadata
// would give the wrong key.
func TestOutcomeParamsCarryTheOperation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata("order_id")))
		require.NoError(t, err)
		var mu sync.Mutex
		var got []handler.OutcomeParams
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("gateway 502")
			}
			return nil, nil
		},
			handler.WithIdentity(ex, handler.RejectMissingKey),
			handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
				mu.Lock()
				got = append(got, p)
				mu.Unlock()
				return handler.OutcomeResult{}
			}))
		for range 3 {
			m := delivery("", "pay 10")
			m.Metadata.Set("order_id", "o-42")
			_, _ = h(m)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 3)
		want := []struct {
			outcome  handler.Outcome
			attempt  int
			previous idempotency.AttemptResult
		}{
			{handler.OutcomeRetry, 1, idempotency.AttemptResult("")},
			{handler.OutcomeProcessed, 2, idempotency.ResultFailed},
			{handler.OutcomeDuplicate, 0, idempotency.AttemptResult("")},
		}
		for i, w := range want {
			p := got[i]
			require.Equal(t, w.outcome, p.Outcome, "delivery %d", i)
			require.Equal(t, "o-42", p.Key, "delivery %d: the extracted key, not the metadata default", i)
			require.Equal(t, "orders", p.Namespace, "delivery %d", i)
			require.Equal(t, w.attempt, p.Attempt, "delivery %d", i)
			require.Equal(t, w.previous, p.Previous, "delivery %d", i)
		}
	})
}

// TestFinalVerdictNotDeadLetteredUnrecorded: when the store cannot record
// a final verdict (its Release fails), the message is not dead-lettered
// and acked while its record is still claimable: it is nacked, and the
// redelivery, once the store is back, records the verdict and
// dead-letters it once.
func TestFinalVerdictNotDeadLetteredUnrecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"final", dlq.Final(dlq.ReasonDecode, errors.New("schema v3 unknown"))},
		{"permanent", retry.Permanent(errors.New("card declined"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				var calls atomic.Int32
				h := e.chain(t, func(*message.Message) ([]*message.Message, error) {
					if calls.Add(1) == 1 {
						e.store.SetDown(true) // the release of this verdict fails
					}
					return nil, tc.err
				})
				_, err := h(delivery("order-1", "pay 10"))
				require.ErrorIs(t, err, middleware.ErrStoreUnavailable)
				require.Empty(t, e.dead.Published(deadTopic), "not dead-lettered while the record is claimable")
				e.store.SetDown(false)
				time.Sleep(10 * time.Second) // the unreleased lease expires

				_, err = h(delivery("order-1", "pay 10"))
				require.NoError(t, err)
				require.Len(t, e.dead.Published(deadTopic), 1)
				rec, err := e.mem.Get(t.Context(), "orders", "order-1")
				require.NoError(t, err)
				require.Equal(t, idempotency.StateExhausted, rec.State)
			})
		})
	}
}
