package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
)

// TestOutageFillsTheArchive runs the program's outage and checks what it
// left: three dead letters with their reasons and attempt ledgers, and the
// dedup records of the charged orders.
func TestOutageFillsTheArchive(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "billing.db")
	require.NoError(t, runOutage(ctx, path))

	db, store, ar, err := open(ctx, path)
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	st, err := ar.Stats(ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, 3, st.Total)
	require.Equal(t, map[string]int{"exhausted": 2, "permanent": 1}, st.ByReason)

	es, err := ar.List(ctx, archive.Filter{Key: "order-1003"}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, 3, es[0].Attempts)
	env, err := dlq.ParseEnvelope(es[0].Message)
	require.NoError(t, err)
	h := env.History
	require.Len(t, h, 3)
	require.Contains(t, h[2].Error, "connection refused")

	rec, err := store.Get(ctx, namespace, "order-1001")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	rec, err = store.Get(ctx, namespace, "order-1003")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateExhausted, rec.State)
}
