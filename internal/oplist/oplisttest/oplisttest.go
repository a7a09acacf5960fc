// Package oplisttest is the test every store's listing (internal/oplist)
// runs: records put in each state through the Store contract, then listed
// with every filter and read page by page.
package oplisttest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/oplist"
)

// Run checks the listing of store, an empty store of its own. exact says
// that pages hold exactly the page size and come in (namespace, key) order
// (SQL, memory); a Redis page ends where a SCAN call ended.
func Run(t *testing.T, store idempotency.Store, exact bool) {
	t.Helper()
	ctx := t.Context()
	l, err := oplist.For(store)
	require.NoError(t, err)

	// ns-a: in_progress k1, failed k2, exhausted k3, done k4; ns-b: exhausted
	// k1..k5.
	put(t, store, "ns-a", "k1", idempotency.StateInProgress)
	put(t, store, "ns-a", "k2", idempotency.StateFailed)
	put(t, store, "ns-a", "k3", idempotency.StateExhausted)
	put(t, store, "ns-a", "k4", idempotency.StateDone)
	for i := 1; i <= 5; i++ {
		put(t, store, "ns-b", fmt.Sprintf("k%d", i), idempotency.StateExhausted)
	}

	t.Run("state", func(t *testing.T) {
		got := all(t, l, oplist.Filter{State: idempotency.StateExhausted, Limit: 2}, exact)
		assert.Equal(t, []string{"ns-a/k3", "ns-b/k1", "ns-b/k2", "ns-b/k3", "ns-b/k4", "ns-b/k5"}, got)
		got = all(t, l, oplist.Filter{State: idempotency.StateInProgress}, exact)
		assert.Equal(t, []string{"ns-a/k1"}, got)
	})
	t.Run("namespace", func(t *testing.T) {
		got := all(t, l, oplist.Filter{Namespace: "ns-a", Limit: 3}, exact)
		assert.Equal(t, []string{"ns-a/k1", "ns-a/k2", "ns-a/k3", "ns-a/k4"}, got)
	})
	t.Run("key in every namespace", func(t *testing.T) {
		got := all(t, l, oplist.Filter{Key: "k2", Limit: 1}, exact)
		assert.Equal(t, []string{"ns-a/k2", "ns-b/k2"}, got)
		got = all(t, l, oplist.Filter{Key: "k9"}, exact)
		assert.Empty(t, got)
		got = all(t, l, oplist.Filter{Namespace: "ns-b", Key: "k2"}, exact)
		assert.Equal(t, []string{"ns-b/k2"}, got)
	})
	t.Run("age", func(t *testing.T) {
		got := all(t, l, oplist.Filter{OlderThan: time.Hour}, exact)
		assert.Empty(t, got, "every record changed just now")
	})
	t.Run("fields", func(t *testing.T) {
		page, err := l.List(ctx, oplist.Filter{Namespace: "ns-a", Key: "k2"})
		require.NoError(t, err)
		require.Len(t, page.Entries, 1)
		e := page.Entries[0]
		assert.Equal(t, idempotency.StateFailed, e.State)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, "fp", e.Fingerprint)
		require.Len(t, e.History, 1)
		assert.Equal(t, "boom k2", e.History[0].Error)
		assert.False(t, e.Updated.IsZero())
		assert.WithinDuration(t, page.Now, e.Updated, time.Minute)
		assert.True(t, e.ExpiresAt.After(page.Now))
		assert.Nil(t, e.Outcome, "a listing reads no outcome")
	})
	t.Run("every record once", func(t *testing.T) {
		got := all(t, l, oplist.Filter{Limit: 1}, exact)
		assert.Len(t, got, 9)
	})
	t.Run("invalid filter", func(t *testing.T) {
		for _, f := range []oplist.Filter{{State: "stuck"}, {Namespace: "a:b"}, {Limit: -1}, {OlderThan: -time.Second}} {
			_, err := l.List(ctx, f)
			assert.ErrorIs(t, err, oplist.ErrInvalidFilter, "%+v", f)
		}
	})
}

// put makes the record of (ns, key) reach state through the Store contract.
func put(t *testing.T, store idempotency.Store, ns, key string, state idempotency.State) {
	t.Helper()
	ctx := context.Background()
	res, err := store.Claim(ctx, idempotency.ClaimRequest{Namespace: ns, Key: key, Fingerprint: "fp", Lease: time.Hour, MaxAttempts: 3})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	switch state {
	case idempotency.StateFailed, idempotency.StateExhausted:
		err = store.Release(ctx, res.Lease, idempotency.Failure{Error: "boom " + key, Reason: "error", Final: state == idempotency.StateExhausted})
	case idempotency.StateDone:
		err = store.Complete(ctx, res.Lease, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u-" + key, Payload: []byte("x")}}})
	}
	require.NoError(t, err)
}

// all reads every page of f and returns "namespace/key" of each entry,
// sorted unless exact (then in the order listed), checking that no exact
// page exceeds the page size and that each entry matches f.
func all(t *testing.T, l oplist.Lister, f oplist.Filter, exact bool) []string {
	t.Helper()
	var out []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100, "the listing does not end")
		page, err := l.List(t.Context(), f)
		require.NoError(t, err)
		if exact {
			require.LessOrEqual(t, len(page.Entries), f.PageSize())
		}
		for _, e := range page.Entries {
			assert.True(t, f.Match(e.Record, e.Updated, page.Now), "%s/%s does not match %+v", e.Namespace, e.Key, f)
			out = append(out, e.Namespace+"/"+e.Key)
		}
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	if !exact {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	if out == nil {
		out = []string{}
	}
	return out
}
