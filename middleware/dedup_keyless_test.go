package middleware_test

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
)

// keylessChain is Identity (keys from metadata only, ProcessWithoutDedup)
// and Dedup around fn, on store, in namespace "kl".
func keylessChain(t *testing.T, store idempotency.Store, fn message.HandlerFunc) message.HandlerFunc {
	t.Helper()
	ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	require.NoError(t, err)
	id, err := middleware.Identity(ex, delivery.ProcessWithoutDedup)
	require.NoError(t, err)
	dd, err := middleware.Dedup(store, "kl")
	require.NoError(t, err)
	return id(dd(fn))
}

// A keyless message that succeeds closes its attempt record uncharged,
// never DONE: a later message with the same UUID runs again.
func TestDedupKeylessSuccessIsNeverDone(t *testing.T) {
	t.Parallel()
	store := leaseStore(t)
	runs := 0
	h := keylessChain(t, store, func(*message.Message) ([]*message.Message, error) {
		runs++
		return nil, nil
	})
	for range 2 {
		_, err := h(message.NewMessage("u-1", []byte(`{}`)))
		require.NoError(t, err)
	}
	require.Equal(t, 2, runs, "the second message with the UUID ran")
	rec, err := store.Get(t.Context(), middleware.KeylessNamespace, "kl/u-1")
	require.NoError(t, err)
	require.NotEqual(t, idempotency.StateDone, rec.State)
}

// A keyless message whose handler fails returns the failure: it is not
// acked as a success.
func TestDedupKeylessFailureReturned(t *testing.T) {
	t.Parallel()
	store := leaseStore(t)
	boom := errors.New("warehouse down")
	h := keylessChain(t, store, func(*message.Message) ([]*message.Message, error) { return nil, boom })
	_, err := h(message.NewMessage("u-1", []byte(`{}`)))
	require.ErrorIs(t, err, boom)
	rec, err := store.Get(t.Context(), middleware.KeylessNamespace, "kl/u-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateFailed, rec.State)
	require.Equal(t, 1, rec.Attempts)
}
