package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/middleware"
)

// A handler that claims in its own transaction (as the SQL inbox does)
// gets the claim left to it once it accepted the offer: durable unless the
// delivery is a first one from a counting broker. The dedup step acts on
// the claim's result: a failure is released on the lease the handler
// reports, a committed attempt is not completed again, a duplicate is not
// run.
func TestDedupLeavesClaimToInTxHandler(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	require.NoError(t, err)
	dedup, err := middleware.Dedup(store, "intx", middleware.WithMaxAttempts(3))
	require.NoError(t, err)

	type seen struct {
		deferred bool
		durable  bool
	}
	var (
		calls []seen
		fail  = true
	)
	h := dedup(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		op, _ := opctx.From(ctx)
		require.NotNil(t, op.InTx)
		require.Same(t, idempotency.Store(store), op.InTx.Store())
		op.InTx.Accept()
		dc := op.Deferred
		calls = append(calls, seen{deferred: dc != nil, durable: dc != nil && dc.Durable})
		if dc == nil {
			op.Committed = true
			return nil, store.Complete(ctx, idempotency.Lease{Namespace: op.Namespace, Key: op.Key, Token: op.Token}, idempotency.Outcome{})
		}
		res, err := store.Claim(ctx, dc.Request)
		if err != nil {
			return nil, err
		}
		dc.Made, dc.Result = true, res
		if res.Status != idempotency.Acquired {
			return nil, nil
		}
		if fail {
			return nil, errors.New("effect failed")
		}
		op.Committed = true
		return nil, store.Complete(context.Background(), res.Lease, idempotency.Outcome{})
	})
	deliver := func(key string, count int) error {
		msg := message.NewMessage("uuid-"+key, []byte(key))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
		if count > 0 {
			msg.SetContext(delivery.WithInfo(context.Background(), delivery.Info{Count: count}))
		}
		_, err := h(msg)
		return err
	}

	fail = false
	require.NoError(t, deliver("first", 0), "the first call claims the usual way")
	fail = true
	require.ErrorContains(t, deliver("op-1", 1), "effect failed")
	rec, err := store.Get(t.Context(), "intx", "op-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateFailed, rec.State, "released on the lease the handler reported")
	fail = false
	require.NoError(t, deliver("op-1", 2))
	rec, err = store.Get(t.Context(), "intx", "op-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 2, rec.Attempts)
	require.NoError(t, deliver("op-1", 3), "a duplicate is acked")
	require.NoError(t, deliver("op-2", 0))

	require.Equal(t, []seen{
		{deferred: false},
		{deferred: true, durable: false}, // first delivery, counting broker
		{deferred: true, durable: true},  // redelivery
		{deferred: true, durable: true},  // the duplicate: claimed, not run further
		{deferred: true, durable: true},  // no broker count
	}, calls)
}

// A handler that accepted the offer once but then returns before claiming
// still has its attempt counted: the dedup step claims after the fact and
// releases the failure (so the budget ends it) or completes the success
// (saying so loudly).
func TestDedupInTxHandlerThatDidNotClaim(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	require.NoError(t, err)
	var logs bytes.Buffer
	dedup, err := middleware.Dedup(store, "intx", middleware.WithMaxAttempts(2),
		middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	fail := false
	h := dedup(func(msg *message.Message) ([]*message.Message, error) {
		op, _ := opctx.From(msg.Context())
		op.InTx.Accept()
		if fail {
			return nil, errors.New("failed before the claim")
		}
		return nil, nil
	})
	deliver := func(key string) error {
		msg := message.NewMessage("uuid-"+key, nil)
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
		_, err := h(msg)
		return err
	}
	require.NoError(t, deliver("a"))
	require.NoError(t, deliver("b"))
	require.Contains(t, logs.String(), "without claiming")
	rec, err := store.Get(t.Context(), "intx", "b")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)

	fail = true
	require.Error(t, deliver("c"))
	require.Error(t, deliver("c"))
	rec, err = store.Get(t.Context(), "intx", "c")
	require.NoError(t, err)
	require.Equal(t, 2, rec.Attempts, "each failure before the claim is counted")
	var fe *dlq.FinalError
	require.ErrorAs(t, deliver("c"), &fe, "the budget ends it")
}

// Dedup used on its own (no Identity step before it) extracts the
// operation itself; the handler still finds it in its context, with the
// attempt's number and token (sqlstore.Inbox needs it).
func TestDedupStandaloneHandlerSeesOperation(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	require.NoError(t, err)
	dedup, err := middleware.Dedup(store, "alone")
	require.NoError(t, err)
	var (
		got  idempotency.Operation
		seen bool
	)
	h := dedup(func(msg *message.Message) ([]*message.Message, error) {
		got, seen = idempotency.OperationFrom(msg.Context())
		return nil, nil
	})
	msg := message.NewMessage("uuid-1", nil)
	msg.Metadata.Set(idempotency.DefaultMetadataKey, "op-1")
	_, err = h(msg)
	require.NoError(t, err)
	require.True(t, seen, "the handler's context carries the operation")
	require.Equal(t, "op-1", got.Key)
	require.Equal(t, 1, got.Attempt)
	require.NotEmpty(t, got.Token)
}
