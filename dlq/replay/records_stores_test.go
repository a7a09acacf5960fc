package replay_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

func randomName(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Every store of the module reads many records at once (RecordsReader),
// and says what Get says of each: state, reopening run, expiry, absent
// keys left out.
func TestStoresReadRecordsInBatch(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) idempotency.Store{
		"memstore": func(t *testing.T) idempotency.Store {
			st, err := memstore.New()
			require.NoError(t, err)
			return st
		},
		"redisstore": func(t *testing.T) idempotency.Store {
			st, err := redisstore.New(t.Context(), testenv.Redis(t), redisstore.WithPrefix(randomName("rr")+":"))
			require.NoError(t, err)
			return st
		},
		"sqlstore-sqlite": func(t *testing.T) idempotency.Store {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "s.db")+"?_pragma=busy_timeout(5000)")
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			st, err := sqlstore.New(db, sqlstore.SQLite)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(t.Context()))
			return st
		},
		"sqlstore-postgres": func(t *testing.T) idempotency.Store {
			db := testsql.Postgres(t)
			table := randomName("rr_")
			st, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
			require.NoError(t, err)
			require.NoError(t, st.Migrate(t.Context()))
			t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+table+`"`) })
			return st
		},
		"sqlstore-mysql": func(t *testing.T) idempotency.Store {
			db := testsql.MySQL(t)
			table := randomName("rr_")
			st, err := sqlstore.New(db, sqlstore.MySQL, sqlstore.WithTable(table))
			require.NoError(t, err)
			require.NoError(t, st.Migrate(t.Context()))
			t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS `"+table+"`") })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			rr, ok := st.(replay.RecordsReader)
			require.True(t, ok, "%T is a RecordsReader", st)
			ctx := t.Context()
			claim := func(key string) idempotency.Lease {
				res, err := st.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 3})
				require.NoError(t, err)
				require.Equal(t, idempotency.Acquired, res.Status)
				return res.Lease
			}
			require.NoError(t, st.Complete(ctx, claim("k-done"), idempotency.Outcome{}))
			require.NoError(t, st.Release(ctx, claim("k-failed"), idempotency.Failure{Error: "x", Reason: "error"}))
			claim("k-running")

			got, err := rr.GetRecords(ctx, "ns", []string{"k-done", "k-failed", "k-running", "k-missing"})
			require.NoError(t, err)
			require.Len(t, got, 3, "the missing key is absent")
			for key, want := range map[string]idempotency.State{
				"k-done": idempotency.StateDone, "k-failed": idempotency.StateFailed, "k-running": idempotency.StateInProgress,
			} {
				rec, ok := got[key]
				require.True(t, ok, key)
				one, err := st.Get(ctx, "ns", key)
				require.NoError(t, err)
				require.Equal(t, want, rec.State, key)
				require.Equal(t, one.State, rec.State, key)
				require.Equal(t, one.ReopenedBy, rec.ReopenedBy, key)
				require.Equal(t, "ns", rec.Namespace)
				require.Equal(t, key, rec.Key)
				if !one.ExpiresAt.IsZero() {
					require.WithinDuration(t, one.ExpiresAt, rec.ExpiresAt, time.Second, key)
				}
			}
			none, err := rr.GetRecords(ctx, "other-ns", []string{"k-done"})
			require.NoError(t, err)
			require.Empty(t, none)
			bad, err := rr.GetRecords(ctx, "bad:ns", []string{"k-done"})
			require.NoError(t, err)
			require.Empty(t, bad, "an invalid namespace has no records")
		})
	}
}
