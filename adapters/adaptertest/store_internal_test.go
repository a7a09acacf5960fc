package adaptertest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// TestSQLiteStoreIsShared: two Opens of one Create's location see the same
// records, as the crash test's parent and children do.
func TestSQLiteStoreIsShared(t *testing.T) {
	t.Parallel()
	s := SQLiteStore()
	at := s.Create(t)
	a, closeA, err := s.Open(t.Context(), at)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeA()) })
	b, closeB, err := s.Open(t.Context(), at)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeB()) })

	res, err := a.Claim(t.Context(), idempotency.ClaimRequest{
		Namespace: namespace, Key: "order-1", Fingerprint: "f", Lease: time.Minute, MaxAttempts: 5,
	})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, a.Complete(t.Context(), res.Lease, idempotency.Outcome{}))
	rec, err := b.Get(t.Context(), namespace, "order-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State, "the other connection sees the record")

	_, err = b.Get(t.Context(), namespace, "order-2")
	require.ErrorIs(t, err, idempotency.ErrNotFound)
	other, closeOther, err := s.Open(t.Context(), s.Create(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeOther()) })
	_, err = other.Get(t.Context(), namespace, "order-1")
	require.ErrorIs(t, err, idempotency.ErrNotFound, "each Create makes a store of its own")
}

// TestChildRefusesAnotherSharedStore: a child whose RunChild was not given
// the parent's SharedStore says so instead of opening the wrong store.
func TestChildRefusesAnotherSharedStore(t *testing.T) {
	raw, err := json.Marshal(childConfig{Name: "first", Store: "redis", StoreAt: "prefix: redis://127.0.0.1:1"})
	require.NoError(t, err)
	t.Setenv(childConfigEnv, string(raw))
	err = runChild(nil, SQLiteStore())
	require.ErrorContains(t, err, `the parent's shared store is "redis", this child's "sqlite": pass Features.SharedStore to RunChild with WithSharedStore`)
}

func TestFeaturesDefaults(t *testing.T) {
	t.Parallel()
	f := Features{}.withDefaults()
	require.NotNil(t, f.NewStore)
	require.Equal(t, sqliteStoreName, f.sharedStore().Name)
	custom := SharedStore{Name: "custom"}
	require.Equal(t, "custom", Features{SharedStore: &custom}.sharedStore().Name)
}
