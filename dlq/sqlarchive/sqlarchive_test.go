package sqlarchive_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
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
