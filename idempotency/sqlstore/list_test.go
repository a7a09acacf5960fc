package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// The SQL store's pages hold at most Limit records, in primary-key
// order (the conformance suite, idempotencytest, checks the rest of the
// listing), on every dialect.
func TestListPagesInKeyOrder(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b backend) {
		s := newStore(t, b.open(t), b.dialect)
		for _, k := range []string{"b", "e", "a", "d", "c"} {
			res, err := s.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: k, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1})
			require.NoError(t, err)
			require.Equal(t, idempotency.Acquired, res.Status)
		}
		var got []string
		f := idempotency.ListFilter{Namespace: "ns", Limit: 2}
		for range 10 {
			page, err := s.List(t.Context(), f)
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
	})
}

// A listing reads rows a transaction holds locked (a claim, an inbox
// effect) without waiting for it: it takes no lock of its own.
func TestListTakesNoLock(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		db := b.open(t)
		table := newTable(t, db, b.dialect)
		s, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table))
		require.NoError(t, err)
		res, err := s.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 3})
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, rebind(b.dialect, "UPDATE "+quote(b.dialect, table)+" SET token = token WHERE namespace = ? AND op_key = ?"), "ns", "k")
		require.NoError(t, err, "the transaction holds the row's write lock")

		listCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, err := s.List(listCtx, idempotency.ListFilter{State: idempotency.StateInProgress})
		require.NoError(t, err, "the listing waited for the row lock")
		require.Len(t, page.Records, 1)
		require.Equal(t, "k", page.Records[0].Key)
	})
}
