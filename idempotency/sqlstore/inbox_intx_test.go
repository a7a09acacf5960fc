package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// inTxChain is handler.New around the inbox on the store itself (not a
// wrapper), so that the inbox accepts to claim in its transaction, warmed
// up by one message so that it has.
func (e *inboxEnv) inTxChain(t testing.TB, fn func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error)) message.HandlerFunc {
	t.Helper()
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 50*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	require.NoError(t, err)
	h, err := handler.New(e.store.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "warm up" {
			return nil, nil
		}
		return fn(ctx, tx, msg)
	}),
		handler.WithStore(e.store, inboxNS),
		handler.WithDeadLetter(e.dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(time.Second),
	)
	require.NoError(t, err)
	_, err = h(delivery("warm-"+randomHex(4), "warm up"))
	require.NoError(t, err)
	return h
}

// deliveries are the two ways a claim reaches the inbox after it accepted:
// a first delivery from a counting broker (one transaction) and a
// delivery without a count (claim committed first).
var deliveries = []struct {
	name  string
	build func(key, payload string) *message.Message
}{
	{"first_counted", func(key, payload string) *message.Message { return counted(delivery(key, payload), 1) }},
	{"uncounted", delivery},
}

func forEachDelivery(t *testing.T, fn func(t *testing.T, b backend, deliver func(key, payload string) *message.Message)) {
	for _, d := range deliveries {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			forEach(t, func(t *testing.T, b backend) { fn(t, b, d.build) })
		})
	}
}

// The effect and the DONE mark commit together, whichever way the claim
// was made; from a counting broker's first delivery nothing of the
// operation is visible before the commit, not even the claim. A duplicate
// re-emits the produced messages without running the handler.
func TestInboxInTxEffectAndDoneCommitTogether(t *testing.T) {
	forEachDelivery(t, func(t *testing.T, b backend, deliver func(key, payload string) *message.Message) {
		e := setupInbox(t, b)
		oneTx := deliver("x", "").Context() != context.Background()
		var calls atomic.Int32
		h := e.inTxChain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			require.NoError(t, e.effect(ctx, tx, msg))
			require.Zero(t, e.count(t, "order-1"))
			rec, err := e.store.Get(t.Context(), inboxNS, "order-1")
			if oneTx {
				require.ErrorIs(t, err, idempotency.ErrNotFound, "the claim commits with the effect")
			} else {
				require.NoError(t, err)
				require.Equal(t, idempotency.StateInProgress, rec.State, "the claim committed before the effect")
			}
			op, _ := idempotency.OperationFrom(ctx)
			require.Equal(t, 1, op.Attempt)
			require.NotEmpty(t, op.Token)
			out := message.NewMessage(watermill.NewUUID(), []byte("charged"))
			out.Metadata.Set("kind", "charged")
			return []*message.Message{out}, nil
		})
		first, err := h(deliver("order-1", "pay 10"))
		require.NoError(t, err)
		require.Len(t, first, 1)
		require.Equal(t, 1, e.count(t, "order-1"))
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 1, rec.Attempts)
		require.Len(t, rec.History, 1)
		require.Equal(t, idempotency.ResultDone, rec.History[0].Result)
		require.Equal(t, idem.ProcessOwner(), rec.History[0].Owner, "the process of the attempt")
		require.False(t, rec.History[0].Started.IsZero())
		require.False(t, rec.History[0].Ended.Before(rec.History[0].Started))
		require.True(t, rec.ExpiresAt.After(time.Now().Add(time.Hour)), "retained: %v", rec.ExpiresAt)
		require.Equal(t, &idempotency.Outcome{Messages: []idempotency.StoredMessage{
			{UUID: first[0].UUID, Metadata: map[string]string{"kind": "charged"}, Payload: []byte("charged")},
		}}, rec.Outcome)

		again, err := h(deliver("order-1", "pay 10"))
		require.NoError(t, err, "a duplicate is acked")
		require.EqualValues(t, 1, calls.Load(), "a duplicate does not run the handler")
		require.Len(t, again, 1)
		require.Equal(t, first[0].UUID, again[0].UUID)
		require.Equal(t, 1, e.count(t, "order-1"))
	})
}

// A failing or panicking handler rolls its effect back; the failure is
// recorded (the claim made again after the rollback when it went with
// it), and the redelivery commits the effect once, as attempt 2.
func TestInboxInTxFailureRecorded(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(map[bool]string{false: "error", true: "panic"}[panics], func(t *testing.T) {
			t.Parallel()
			forEachDelivery(t, func(t *testing.T, b backend, deliver func(key, payload string) *message.Message) {
				e := setupInbox(t, b)
				var calls atomic.Int32
				h := e.inTxChain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
					require.NoError(t, e.effect(ctx, tx, msg))
					if calls.Add(1) == 1 {
						if panics {
							panic("nil map in the pricing code")
						}
						return nil, errors.New("card gateway timeout")
					}
					return nil, nil
				})
				_, err := h(deliver("order-1", "pay 10"))
				require.Error(t, err)
				require.Zero(t, e.count(t, "order-1"), "the effect was rolled back")
				rec := e.get(t, "order-1")
				require.Equal(t, idempotency.StateFailed, rec.State)
				require.Equal(t, 1, rec.Attempts)
				require.Equal(t, idempotency.ResultFailed, rec.History[0].Result)
				if panics {
					var pe *middleware.PanicError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, "panic", rec.History[0].Reason)
				} else {
					require.Contains(t, rec.History[0].Error, "card gateway timeout")
				}

				_, err = h(counted(delivery("order-1", "pay 10"), 2))
				require.NoError(t, err)
				require.Equal(t, 1, e.count(t, "order-1"), "effect once")
				rec = e.get(t, "order-1")
				require.Equal(t, idempotency.StateDone, rec.State)
				require.Equal(t, 2, rec.Attempts)
			})
		})
	}
}
