package sqlarchive_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// TestCursorSeesLateCommit interleaves two publishes deliberately. A
// transaction of the test (conn 0) holds an uncommitted row with the ID of
// entry A, so A's publish, once it has its Seq, waits on that row's lock;
// B is published meanwhile. A reader between the commits must not see B
// with a Seq above the one A commits with later: a cursor that moved past
// B would skip A for good. Seq order must be commit order.
func TestCursorSeesLateCommit(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		if b.dialect == sqlstore.SQLite {
			continue // one writer at a time: no two transactions interleave
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testCursorSeesLateCommit(t, b)
		})
	}
}

func testCursorSeesLateCommit(t *testing.T, b backend) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	a := setup(t, b)
	db := b.open(t)
	entries := sqlarchive.Tables(a)[0]
	prefix := strings.TrimSuffix(entries, "_entries")

	// conn 0 holds A's ID, uncommitted.
	hold, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	ins := "INSERT INTO " + entries + " (id, payload, metadata, copies, archived_at, reason, original_topic, handler, op_key, error, error_type, dead_lettered_at, replay_id) VALUES (?, ?, ?, 1, 0, '', '', '', '', '', '', 0, '')"
	if b.dialect == sqlstore.Postgres {
		ins = strings.NewReplacer("?, ?, ?", "$1, $2, $3").Replace(ins)
	}
	_, err = hold.ExecContext(ctx, ins, "entry-a", []byte{}, []byte{})
	require.NoError(t, err)

	publish := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() {
			m := message.NewMessage(id, []byte(id))
			m.SetContext(ctx)
			done <- a.Publish("dead", m)
		}()
		return done
	}
	doneA := publish("entry-a")
	// A has its Seq and waits for conn 0.
	doneA = waitLockWaiters(ctx, t, db, b.dialect, prefix, 1, doneA)
	select {
	case err := <-doneA:
		t.Fatalf("A's publish returned while conn 0 holds its ID: %v", err)
	default:
	}
	doneB := publish("entry-b")
	// B either commits at once (its Seq above A's, A uncommitted) or waits
	// for A: wait for one or the other.
	doneB = waitLockWaiters(ctx, t, db, b.dialect, prefix, 2, doneB)

	seen := map[string]int64{}
	cursor := int64(0)
	read := func() {
		page, err := a.List(ctx, archive.Filter{}, archive.Page{After: cursor, Limit: 100})
		require.NoError(t, err)
		for _, e := range page {
			seen[e.ID] = e.Seq
			cursor = e.Seq
		}
	}
	read()
	require.NoError(t, hold.Rollback())
	require.NoError(t, <-doneA)
	require.NoError(t, <-doneB)
	read()
	require.Contains(t, seen, "entry-b")
	require.Contains(t, seen, "entry-a", "the cursor passed B (Seq %d) before A committed: A is skipped for good (seen %v)", seen["entry-b"], seen)
	require.Less(t, seen["entry-a"], seen["entry-b"], "A committed first")
}

// BenchmarkPublishParallel measures Publish of one envelope from 2 and 16
// goroutines at once: the cost of the lock that makes Seq order commit
// order (see Ordering in the package doc for the figures).
//
//	go test ./dlq/sqlarchive -run '^$' -bench PublishParallel -benchtime 2000x -count 3
func BenchmarkPublishParallel(b *testing.B) {
	for _, be := range backends {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", be.name, par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				a := setup(b, be)
				var n atomic.Int64
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						id := fmt.Sprintf("bench-%d", n.Add(1))
						if err := a.Publish("dead", message.NewMessage(id, make([]byte, 256))); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
			})
		}
	}
}

// waitLockWaiters waits until n transactions on the archive's tables
// wait for a lock, or until done (when not nil) delivers. It returns a
// channel that delivers done's result.
func waitLockWaiters(ctx context.Context, t *testing.T, db *sql.DB, d sqlstore.Dialect, prefix string, n int, done <-chan error) <-chan error {
	t.Helper()
	q := `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`
	if d == sqlstore.MySQL {
		// INNODB_TRX misses waiters (a SELECT ... FOR UPDATE waiting for a
		// row lock is not listed on MariaDB 10.11): count the sessions
		// inside a statement on the archive's tables, other than this one.
		q = `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute') AND INFO LIKE CONCAT('%', ?, '%')`
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var got int
		require.NoError(t, db.QueryRowContext(ctx, q, prefix).Scan(&got))
		if got >= n {
			return done
		}
		select {
		case err := <-done:
			again := make(chan error, 1)
			again <- err
			return again
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %d lock waiters on %s: %v", n, prefix, ctx.Err())
		}
	}
}
