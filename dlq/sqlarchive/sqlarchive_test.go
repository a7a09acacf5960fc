package sqlarchive_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // driver "sqlite", pure Go

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/archivetest"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testsql"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is one database the tests run on.
type backend struct {
	name    string
	dialect sqlstore.Dialect
	open    func(t testing.TB) *sql.DB
}

// backends: SQLite always (a temporary file per test), PostgreSQL and
// MySQL on SURELY_POSTGRES_URL and SURELY_MYSQL_URL.
var backends = []backend{
	{"sqlite", sqlstore.SQLite, openSQLite},
	{"postgres", sqlstore.Postgres, testsql.Postgres},
	{"mysql", sqlstore.MySQL, testsql.MySQL},
}

func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "dlq.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// setup returns a migrated archive on tables of the test's own, dropped
// when the test ends.
func setup(t testing.TB, b backend, opts ...dlq.Option) *sqlarchive.Archive {
	t.Helper()
	db := b.open(t)
	var r [5]byte
	_, _ = rand.Read(r[:])
	prefix := "dlqt_" + hex.EncodeToString(r[:])
	a, err := sqlarchive.New(db, b.dialect, append([]dlq.Option{archive.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, table := range sqlarchive.Tables(a) {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
				t.Errorf("drop %s: %v", table, err)
			}
		}
	})
	require.NoError(t, a.Migrate(t.Context()))
	require.NoError(t, a.Migrate(t.Context()), "Migrate is idempotent")
	return a
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			archivetest.Run(t, func(t *testing.T) archive.Archive { return setup(t, b) })
		})
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			archivetest.RunPrune(t, func(t *testing.T, retention time.Duration, log *slog.Logger) archivetest.PruneArchive {
				opts := []dlq.Option{dlq.WithLogger(log)}
				if retention > 0 {
					opts = append(opts, dlq.WithRetention(retention))
				}
				return setup(t, b, opts...)
			})
		})
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	for name, opt := range map[string]dlq.Option{
		"upper-case prefix": archive.WithPrefix("Dlq"),
		"quote in prefix":   archive.WithPrefix(`a"b`),
		"empty prefix":      archive.WithPrefix(""),
		"zero retention":    dlq.WithRetention(0),
		"nil clock":         dlq.WithClock(nil),
		"nil logger":        dlq.WithLogger(nil),
		// An option of another constructor of the family is refused.
		"publisher option": dlq.WithConsumerGroup("g"),
	} {
		_, err := sqlarchive.New(db, sqlstore.SQLite, opt)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
	_, err = sqlarchive.New(nil, sqlstore.SQLite)
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	_, err = sqlarchive.New(db, sqlstore.Dialect(42))
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	_, err = sqlarchive.New(db, sqlstore.SQLite, dlq.WithConsumerGroup("g"))
	require.ErrorContains(t, err, "sqlarchive.New does not take option WithConsumerGroup")
}

func TestWithoutMigrateIsAnError(t *testing.T) {
	t.Parallel()
	a, err := sqlarchive.New(openSQLite(t), sqlstore.SQLite)
	require.NoError(t, err)
	require.Error(t, a.Publish("dead", message.NewMessage("id-1", []byte("p"))), "no table: the publish fails, the source is nacked")
}

func BenchmarkArchive(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			archivetest.Bench(b, 10000, func(b *testing.B) archive.Archive { return setup(b, be) })
		})
	}
}

func TestCorruptRowIsAClearError(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	a, err := sqlarchive.New(db, sqlstore.SQLite, archive.WithPrefix("corrupt"))
	require.NoError(t, err)
	require.NoError(t, a.Migrate(t.Context()))
	require.NoError(t, a.Publish("dead", message.NewMessage("id-1", []byte("p"))))
	_, err = db.ExecContext(t.Context(), `UPDATE "corrupt_entries" SET metadata = x'05ff'`)
	require.NoError(t, err)
	_, err = a.Get(t.Context(), "id-1")
	require.ErrorContains(t, err, `entry "id-1" is corrupt`)
	_, err = a.List(t.Context(), archive.Filter{}, archive.Page{})
	require.ErrorContains(t, err, "corrupt")
}

// TestValuesOfAnyLength: topics, handlers, reasons, error types and keys
// far beyond any index's entry limit (PostgreSQL's is about 2,700 bytes,
// MySQL's 3,072; a Redis stream or a Go channel takes a topic of any
// length), incompressible, are archived, listed by each, counted and
// deleted.
func TestValuesOfAnyLength(t *testing.T) {
	t.Parallel()
	long := func(n int) string {
		b := make([]byte, n/2)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, b)
			ctx := t.Context()
			topic, handler, reason, etype, key := long(10000), long(10000), long(4000), long(4000), long(100000)
			var msgs []*message.Message
			for i := range 2 {
				m := message.NewMessage(fmt.Sprintf("long-%d", i), []byte("p"))
				m.Metadata.Set(dlq.KeyReason, reason)
				m.Metadata.Set(dlq.KeyOriginalTopic, topic[:len(topic)-i])
				m.Metadata.Set(dlq.KeyHandler, handler)
				m.Metadata.Set(dlq.KeyErrorTypes, etype)
				m.Metadata.Set(dlq.KeyOperationKey, key)
				msgs = append(msgs, m)
			}
			require.NoError(t, a.Publish("dead", msgs...))
			for i, f := range []archive.Filter{{Topic: topic}, {Topic: topic[:len(topic)-1]}} {
				got, err := a.List(ctx, f, archive.Page{})
				require.NoError(t, err)
				require.Len(t, got, 1)
				require.Equal(t, msgs[i].UUID, got[0].ID)
				st, err := a.Stats(ctx, f)
				require.NoError(t, err)
				require.Equal(t, 1, st.Total)
			}
			for _, f := range []archive.Filter{{Handler: handler}, {Reason: dlq.Reason(reason)}, {ErrorType: etype}, {Key: key}} {
				got, err := a.List(ctx, f, archive.Page{})
				require.NoError(t, err)
				require.Len(t, got, 2)
				st, err := a.Stats(ctx, f)
				require.NoError(t, err)
				require.Equal(t, 2, st.Total)
			}
			st, err := a.Stats(ctx, archive.Filter{})
			require.NoError(t, err)
			require.Equal(t, map[string]int{topic: 1, topic[:len(topic)-1]: 1}, st.ByTopic)
			require.Equal(t, map[string]int{etype: 2}, st.ByErrorType)
			n, err := a.Delete(ctx, msgs[0].UUID, msgs[1].UUID)
			require.NoError(t, err)
			require.Equal(t, 2, n)
			st, err = a.Stats(ctx, archive.Filter{})
			require.NoError(t, err)
			require.Zero(t, st.Total)
		})
	}
}
