package memstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// The memory store's pages hold at most Limit records, in (namespace,
// key) order (the conformance suite, idempotencytest, checks the rest of
// the listing).
func TestListPagesInKeyOrder(t *testing.T) {
	t.Parallel()
	s, err := memstore.New()
	require.NoError(t, err)
	for _, k := range []string{"b", "e", "a", "d", "c"} {
		res, err := s.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: k, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1})
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
	}
	l, ok := s.(idempotency.Lister)
	require.True(t, ok, "memstore is an idempotency.Lister")
	var got []string
	f := idempotency.ListFilter{Namespace: "ns", Limit: 2}
	for range 10 {
		page, err := l.List(t.Context(), f)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Records), 2)
		for _, r := range page.Records {
			got = append(got, r.Key)
		}
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, got)
}
