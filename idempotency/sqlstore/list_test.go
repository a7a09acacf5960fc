package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/oplist"
	"github.com/surely-dev/surely/internal/oplist/oplisttest"
)

// The listing of surely ops ls, on every dialect.
func TestList(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b backend) {
		oplisttest.Run(t, newStore(t, b.open(t), b.dialect), true)
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

		l, err := oplist.For(s)
		require.NoError(t, err)
		listCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, err := l.List(listCtx, oplist.Filter{State: idempotency.StateInProgress})
		require.NoError(t, err, "the listing waited for the row lock")
		require.Len(t, page.Entries, 1)
		require.Equal(t, "k", page.Entries[0].Key)
	})
}
