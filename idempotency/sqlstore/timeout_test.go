package sqlstore_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/middleware"
)

// database/sql has no timeout of its own: a store call waiting for a row
// that another transaction holds would wait for as long as that one does
// (MySQL: innodb_lock_wait_timeout, 50s; PostgreSQL: for ever). The dedup
// step bounds it by default, so the delivery fails as a store outage
// (nacked, redelivered) instead of holding the message. The claim here
// takes over an expired lease, so it needs the row lock (on PostgreSQL a
// claim that changes nothing answers from the committed row without it).
func TestDedupBoundsABlockedClaimByDefault(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		if b.dialect == sqlstore.SQLite {
			t.Skip("SQLite waits for its write lock in the driver's busy handler, bounded by its busy timeout")
		}
		db := b.open(t)
		table := newTable(t, db, b.dialect)
		store, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table))
		require.NoError(t, err)
		const ns, key = "blocked", "op-1"
		ctx := t.Context()
		payload := []byte("p")
		fp := sha256.Sum256(payload) // the dedup step's fingerprint of the message
		_, err = store.Claim(ctx, idempotency.ClaimRequest{Namespace: ns, Key: key, Fingerprint: hex.EncodeToString(fp[:]), Lease: time.Minute, MaxAttempts: 5})
		require.NoError(t, err)
		sqlstore.AdvanceClock(store, 2*time.Minute) // the lease has expired: the next claim takes it over

		// Another transaction holds the record's row.
		holder, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Rollback() })
		var one int
		require.NoError(t, holder.QueryRowContext(ctx, rebind(b.dialect,
			"SELECT 1 FROM "+quote(b.dialect, table)+" WHERE namespace = ? AND op_key = ? FOR UPDATE"), ns, key).Scan(&one))

		const lease = 3 * time.Second // default store timeout: a third of it
		dedup, err := middleware.Dedup(store, ns, middleware.WithLease(lease))
		require.NoError(t, err)
		ran := false
		h := dedup(func(*message.Message) ([]*message.Message, error) {
			ran = true
			return nil, nil
		})
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			msg := message.NewMessage("uuid-1", payload)
			msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
			_, err := h(msg)
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, middleware.ErrStoreUnavailable)
			require.GreaterOrEqual(t, time.Since(start), lease/3, "the Claim waited for its deadline")
			require.False(t, ran)
		case <-time.After(30 * time.Second):
			_ = holder.Rollback() // let the blocked Claim return before the test ends
			t.Fatalf("a Claim blocked on a held row was not bounded (it returned %v once the row was free)", <-done)
		}
		requireUsable(t, db)
	})
}

// requireUsable checks that the pool still answers after a canceled query.
func requireUsable(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, db.PingContext(ctx))
}
