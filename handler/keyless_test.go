package handler_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/middleware"
)

// Messages without a key, processed under ProcessWithoutDedup, have no
// dedup record, but still a bounded number of attempts: by the broker's
// delivery count when it has one, else by an attempt record under the
// message UUID in a namespace of its own.

func keylessChain(t *testing.T, e *env, fn message.HandlerFunc, opts ...handler.Option) message.HandlerFunc {
	t.Helper()
	ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	require.NoError(t, err)
	return e.chain(t, fn, append([]handler.Option{handler.WithIdentity(ex, handler.ProcessWithoutDedup)}, opts...)...)
}

// TestKeylessMessagesAreBounded: a keyless message that fails every time
// is dead-lettered (reason exhausted) after the budget (3 attempts), not
// retried forever.
func TestKeylessMessagesAreBounded(t *testing.T) {
	t.Parallel()
	t.Run("attempt record", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, 0)
			var calls atomic.Int32
			h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) {
				calls.Add(1)
				return nil, errors.New("inventory 503")
			})
			src := delivery("", "pay 10") // a broker redelivers the same message (same UUID)
			n := deliverContained(t, h, func() *message.Message { return src.Copy() }, 100)
			require.Equal(t, 4, n, "3 attempts, then the exhausted claim dead-letters without running")
			require.EqualValues(t, 3, calls.Load())
			dead := e.dead.Published(deadTopic)
			require.Len(t, dead, 1)
			md := dead[0].Metadata
			require.Equal(t, string(dlq.ReasonExhausted), md.Get(dlq.KeyReason))
			require.Equal(t, "3", md.Get(dlq.KeyAttempts))
			require.Contains(t, md.Get(dlq.KeyError), "inventory 503")
			require.Empty(t, md.Get(dlq.KeyOperationKey), "the message has no operation key")

			rec, err := e.mem.Get(t.Context(), idem.KeylessNamespace, "orders/"+src.UUID)
			require.NoError(t, err, "the attempts are counted under the message UUID")
			require.Equal(t, idempotency.StateExhausted, rec.State)
			_, err = e.mem.Get(t.Context(), "orders", src.UUID)
			require.ErrorIs(t, err, idempotency.ErrNotFound, "nothing in the handler's own namespace")
		})
	})
	t.Run("broker delivery count", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, 0)
			var calls atomic.Int32
			h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) {
				calls.Add(1)
				return nil, errors.New("inventory 503")
			})
			src := delivery("", "pay 10")
			count := 0
			n := deliverContained(t, h, func() *message.Message {
				count++
				m := src.Copy()
				m.SetContext(surelydelivery.WithInfo(context.Background(), surelydelivery.Info{Count: count, Redelivered: count > 1}))
				return m
			}, 100)
			require.Equal(t, 4, n, "3 attempts, then the exhausted claim dead-letters without running")
			require.EqualValues(t, 3, calls.Load())
			dead := e.dead.Published(deadTopic)
			require.Len(t, dead, 1)
			require.Equal(t, string(dlq.ReasonExhausted), dead[0].Metadata.Get(dlq.KeyReason))
			require.Equal(t, "3", dead[0].Metadata.Get(dlq.KeyAttempts))
			require.Contains(t, dead[0].Metadata.Get(dlq.KeyError), "inventory 503")
			// The first delivery ran without a store call; its failure and
			// the later attempts are charged to the record.
			rec, err := e.mem.Get(t.Context(), idem.KeylessNamespace, "orders/"+src.UUID)
			require.NoError(t, err)
			require.Equal(t, idempotency.StateExhausted, rec.State)

			// A delivery past the budget (a dead-letter publish failed) is
			// dead-lettered again without running.
			m := src.Copy()
			m.SetContext(surelydelivery.WithInfo(context.Background(), surelydelivery.Info{Count: 5, Redelivered: true}))
			_, err = h(m)
			require.NoError(t, err)
			require.EqualValues(t, 3, calls.Load())
			require.Len(t, e.dead.Published(deadTopic), 2)
		})
	})
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, 0)
			var calls atomic.Int32
			h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) {
				calls.Add(1)
				panic("nil map write")
			})
			src := delivery("", "pay 10")
			n := deliverContained(t, h, func() *message.Message { return src.Copy() }, 100)
			require.Equal(t, 4, n)
			require.EqualValues(t, 3, calls.Load())
			dead := e.dead.Published(deadTopic)
			require.Len(t, dead, 1)
			require.Equal(t, string(dlq.ReasonPanic), dead[0].Metadata.Get(dlq.KeyReason))
		})
	})
}

// TestKeylessMessageProcessed: a keyless message that succeeds is
// processed without dedup (outcome processed_without_dedup); its attempt
// record is closed uncharged, never done, so a redelivery of that same
// message (same UUID, the ack was lost) runs again: there is no dedup.
func TestKeylessMessageProcessed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := keylessChain(t, e, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			op, ok := idempotency.OperationFrom(msg.Context())
			require.True(t, ok)
			require.Empty(t, op.Key, "the handler sees no operation key")
			return nil, nil
		})
		src := delivery("", "pay 10")
		_, err := h(src.Copy())
		require.NoError(t, err)
		require.EqualValues(t, 1, e.count(handler.OutcomeProcessedWithoutDedup))
		_, err = h(src.Copy())
		require.NoError(t, err)
		require.EqualValues(t, 2, calls.Load())
		require.Zero(t, e.count(handler.OutcomeDuplicate))
		rec, err := e.mem.Get(t.Context(), idem.KeylessNamespace, "orders/"+src.UUID)
		require.NoError(t, err)
		require.Equal(t, idempotency.StateFailed, rec.State, "claimable, not done")
		require.Equal(t, rec.Attempts, rec.Canceled, "nothing charged")
		_, err = h(delivery("", "pay 10")) // another message, same payload
		require.NoError(t, err)
		require.EqualValues(t, 3, calls.Load())
	})
}

func TestKeylessNamespaceIsReserved(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	_, err := handler.New(func(*message.Message) ([]*message.Message, error) { return nil, nil },
		handler.WithStore(e.store, idem.KeylessNamespace), handler.WithDeadLetter(e.dead, deadTopic))
	require.ErrorIs(t, err, handler.ErrInvalidOption)
	_, err = middleware.Dedup(e.store, idem.KeylessNamespace)
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
}

// TestKeylessMessageWithoutUUIDHasOneAttempt: with neither a broker count
// nor a UUID to count by, a keyless message gets one attempt.
func TestKeylessMessageWithoutUUIDHasOneAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, errors.New("inventory 503")
		})
		n := deliverContained(t, h, func() *message.Message { return message.NewMessage("", []byte("pay 10")) }, 100)
		require.Equal(t, 1, n)
		require.EqualValues(t, 1, calls.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		require.Equal(t, string(dlq.ReasonExhausted), dead[0].Metadata.Get(dlq.KeyReason))
		require.Equal(t, "1", dead[0].Metadata.Get(dlq.KeyAttempts))
	})
}

// TestKeylessRecordOfAnUnusableUUID: a message UUID that is no valid key
// (a control byte) is counted under its SHA-256.
func TestKeylessRecordOfAnUnusableUUID(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) { return nil, errors.New("inventory 503") })
		const uuid = "m\x00-1"
		n := deliverContained(t, h, func() *message.Message { return message.NewMessage(uuid, []byte("pay 10")) }, 100)
		require.Equal(t, 4, n)
		sum := sha256.Sum256([]byte(uuid))
		rec, err := e.mem.Get(t.Context(), idem.KeylessNamespace, "orders/sha256:"+hex.EncodeToString(sum[:]))
		require.NoError(t, err)
		require.Equal(t, idempotency.StateExhausted, rec.State)
	})
}
