package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/middleware"
)

// completeCounter counts the Complete calls that reach the store.
type completeCounter struct {
	idempotency.Store
	n atomic.Int32
}

func (c *completeCounter) Complete(ctx context.Context, l idempotency.Lease, o idempotency.Outcome) error {
	c.n.Add(1)
	return c.Store.Complete(ctx, l, o)
}

// A handler that wrote the DONE mark itself and says so (Committed, as
// the SQL inbox does) gets no Complete of Dedup's: the message is acked
// with its produced messages after the handler's own Complete only.
func TestDedupCommittedSkipsComplete(t *testing.T) {
	t.Parallel()
	store := &completeCounter{Store: leaseStore(t)}
	out := message.NewMessage("out-1", []byte(`{}`))
	ex, err := idempotency.NewExtractor()
	require.NoError(t, err)
	id, err := middleware.Identity(ex, delivery.RejectMissingKey)
	require.NoError(t, err)
	h := id(leaseDedup(t, store, func(m *message.Message) ([]*message.Message, error) {
		op, ok := opctx.From(m.Context())
		require.True(t, ok)
		l := idempotency.Lease{Namespace: leaseNS, Key: op.Key, Token: op.Token, Attempt: op.Attempt}
		if err := store.Complete(m.Context(), l, idempotency.Outcome{}); err != nil {
			return nil, err
		}
		op.Committed = true
		return []*message.Message{out}, nil
	}))
	msgs, err := h(leaseMsg("u-1", "k-1", `{}`))
	require.NoError(t, err)
	require.Equal(t, []*message.Message{out}, msgs)
	require.Equal(t, int32(1), store.n.Load(), "only the handler's own Complete")
	rec, err := store.Get(t.Context(), leaseNS, "k-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
}
