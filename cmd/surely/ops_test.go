package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// opsStore returns a memstore on a clock that the test moves, holding one
// record per state (and a lease that expired).
func opsStore(t *testing.T) idempotency.Store {
	t.Helper()
	clock := fixedNow.Add(-time.Hour)
	store, err := memstore.New(idempotency.WithClock(func() time.Time { return clock }))
	require.NoError(t, err)
	ctx := context.Background()
	claim := func(ns, key string, lease time.Duration) idempotency.Lease {
		res, err := store.Claim(ctx, idempotency.ClaimRequest{Namespace: ns, Key: key, Fingerprint: "fp", Lease: lease, MaxAttempts: 3})
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		return res.Lease
	}
	claim("charge-payments", "order-1", time.Minute) // expires: its owner died
	l := claim("charge-payments", "order-2", time.Minute)
	require.NoError(t, store.Release(ctx, l, idempotency.Failure{Error: "gateway 503", RetryAfter: 2 * time.Hour}))
	l = claim("charge-payments", "order-3", time.Minute)
	require.NoError(t, store.Release(ctx, l, idempotency.Failure{Error: "card declined", Final: true}))
	clock = clock.Add(50 * time.Minute)
	l = claim("reserve-stock", "order-1", time.Minute)
	require.NoError(t, store.Complete(ctx, l, idempotency.Outcome{}))
	claim("reserve-stock", "order-4", 30*time.Minute) // live
	clock = fixedNow
	return store
}

func TestOpsLsGolden(t *testing.T) {
	t.Parallel()
	store := opsStore(t)
	a, _, _ := testApp(t)
	a.memStores["ops"] = store
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"ops_ls_text", nil},
		{"ops_ls_json", []string{"--json"}},
		{"ops_ls_stuck_text", []string{"--state", "in_progress", "--older-than", "30m"}},
		{"ops_ls_page_text", []string{"--limit", "2"}},
	} {
		out, stderr, code := run(t, a, append([]string{"ops", "ls", "--store", "mem:ops"}, tc.args...)...)
		require.Equal(t, 0, code, stderr)
		golden(t, tc.name, out)
	}
	out, stderr, code := run(t, a, "ops", "ls", "--store", "mem:ops", "--limit", "2", "--after", "charge-payments/order-2")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "order-3")
	assert.NotContains(t, out, "order-2 ")
}

func TestInspectEveryNamespace(t *testing.T) {
	t.Parallel()
	store := opsStore(t)
	a, _, _ := testApp(t)
	a.memStores["ops"] = store
	out, stderr, code := run(t, a, "inspect", "order-1", "--store", "mem:ops")
	require.Equal(t, 0, code, stderr)
	golden(t, "inspect_every_namespace_text", out) // memstore tokens are sequential
	_, stderr, code = run(t, a, "inspect", "order-9", "--store", "mem:ops")
	assert.Equal(t, exitNotFound, code, stderr)
	assert.Contains(t, stderr, `operation "order-9": idempotency: record not found in any namespace`)
}

func TestAttemptsText(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1 attempt", attemptsText(recordJSON{Attempts: 1, Charged: 1}))
	assert.Equal(t, "4 attempts", attemptsText(recordJSON{Attempts: 4, Charged: 4}))
	assert.Equal(t, "5 attempts (2 canceled by a shutdown, not counted: 3 count against the budget)",
		attemptsText(recordJSON{Attempts: 5, Canceled: 2, Charged: 3}))
}
