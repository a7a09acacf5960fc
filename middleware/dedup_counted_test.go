package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// claimCounter is a memstore that counts its claims.
type claimCounter struct {
	idempotency.Store
	claims atomic.Int32
}

func (c *claimCounter) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

// countedKeylessChain is Observe, Retry (one in-process attempt) and the
// keyless chain of keylessChain around fn: the chain handler.New builds,
// which reports how many in-process attempts a delivery made.
func countedKeylessChain(t *testing.T, store idempotency.Store, fn message.HandlerFunc) message.HandlerFunc {
	t.Helper()
	obs, err := middleware.Observe()
	require.NoError(t, err)
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(1))
	require.NoError(t, err)
	rt, err := middleware.Retry(policy, nil)
	require.NoError(t, err)
	return obs(rt(keylessChain(t, store, fn)))
}

func counted(msg *message.Message, count int) *message.Message {
	msg.SetContext(delivery.WithInfo(context.Background(), delivery.Info{Count: count}))
	return msg
}

// A keyless message that the broker numbers as its first delivery runs
// without a store call, and its success leaves no record; any other
// delivery of it (a redelivery, a broker that reports no count) claims
// its record before it runs.
func TestDedupKeylessFirstCountedDeliveryCostsNoClaim(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	store := &claimCounter{Store: mem}
	runs := 0
	h := countedKeylessChain(t, store, func(*message.Message) ([]*message.Message, error) {
		runs++
		return nil, nil
	})

	_, err = h(counted(message.NewMessage("u-first", []byte(`{}`)), 1))
	require.NoError(t, err)
	require.Equal(t, int32(0), store.claims.Load(), "a first delivery from a counting broker claims nothing")
	_, err = store.Get(t.Context(), idem.KeylessNamespace, "kl/u-first")
	require.ErrorIs(t, err, idempotency.ErrNotFound, "its success leaves no record")

	_, err = h(counted(message.NewMessage("u-again", []byte(`{}`)), 2))
	require.NoError(t, err)
	require.Equal(t, int32(1), store.claims.Load(), "a redelivery claims the record")

	_, err = h(counted(message.NewMessage("u-nocount", []byte(`{}`)), 0))
	require.NoError(t, err)
	require.Equal(t, int32(2), store.claims.Load(), "a delivery without a count claims the record")
	require.Equal(t, 3, runs)
}

// A keyless message without a UUID has no record: from a broker that
// carries delivery facts but no count (Count 0), it has one attempt, and
// its failure is dead-lettered at once (reason exhausted), not nacked
// for a redelivery that nothing would bound.
func TestDedupKeylessWithoutUUIDOrCountHasOneAttempt(t *testing.T) {
	t.Parallel()
	store := leaseStore(t)
	boom := errors.New("warehouse down")
	h := keylessChain(t, store, func(*message.Message) ([]*message.Message, error) { return nil, boom })
	msg := counted(message.NewMessage("", []byte(`{}`)), 0)
	_, err := h(msg)
	fe, final := dlq.AsFinal(err)
	require.True(t, final, "dead-lettered on its only attempt, got %v", err)
	require.Equal(t, dlq.ReasonExhausted, fe.Reason)
	require.Equal(t, 1, fe.Attempts)
}

// The deferred claim a handler makes in its own transaction (the SQL
// inbox) carries the broker's count as the number of earlier deliveries,
// and is durable unless the delivery is a first one by a broker that
// counts: a broker that carries delivery facts without a count (Count 0)
// gets a durable claim with no earlier deliveries.
func TestDedupDeferredClaimFollowsBrokerCount(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	require.NoError(t, err)
	dedup, err := middleware.Dedup(store, "prior")
	require.NoError(t, err)
	type seen struct {
		durable bool
		prior   int
	}
	var got []seen
	h := dedup(func(msg *message.Message) ([]*message.Message, error) {
		op, _ := opctx.From(msg.Context())
		require.NotNil(t, op.InTx)
		op.InTx.Accept()
		dc := op.Deferred
		if dc == nil {
			return nil, nil // the first call, before the offer was accepted, claims the usual way
		}
		got = append(got, seen{durable: dc.Durable, prior: dc.PriorDeliveries})
		return nil, errors.New("rolled back") // claimed after the fact and released
	})
	deliver := func(key string, count int) {
		msg := counted(message.NewMessage("uuid-"+key, []byte(key)), count)
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
		_, _ = h(msg)
	}
	deliver("warm-up", 1)
	got = nil
	deliver("a", 0)
	deliver("b", 1)
	deliver("c", 3)
	require.Equal(t, []seen{
		{durable: true, prior: 0},  // facts without a count
		{durable: false, prior: 0}, // a counting broker's first delivery
		{durable: true, prior: 2},  // its third
	}, got)
}

// releaseFails is a memstore whose Release fails.
type releaseFails struct{ idempotency.Store }

func (releaseFails) Release(context.Context, idempotency.Lease, idempotency.Failure) error {
	return errors.New("store unreachable")
}

// Closing the record of a keyless message that succeeded warns only when
// the close failed (the claim then stays until its lease expires); the
// message is acked either way.
func TestDedupKeylessCloseWarnsOnlyOnFailure(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		mem, err := memstore.New()
		require.NoError(t, err)
		store := mem
		if fail {
			store = releaseFails{mem}
		}
		var logs bytes.Buffer
		ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
		require.NoError(t, err)
		id, err := middleware.Identity(ex, delivery.ProcessWithoutDedup)
		require.NoError(t, err)
		dd, err := middleware.Dedup(store, "kl", middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		h := id(dd(func(*message.Message) ([]*message.Message, error) { return nil, nil }))
		_, err = h(message.NewMessage("u-1", []byte(`{}`)))
		require.NoError(t, err, "acked either way")
		require.Equal(t, fail, strings.Contains(logs.String(), "closing the attempt record of a keyless message failed"), "release failed: %v; logs: %s", fail, logs.String())
	}
}
