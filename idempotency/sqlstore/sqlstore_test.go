package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // driver "sqlite", pure Go

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/sqldialect"
	"github.com/surely-dev/surely/internal/testsql"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		// A child process of a crash test (crash_test.go), not a test run.
		os.Exit(crashChild())
	}
	goleak.VerifyTestMain(m)
}

// backend is one database the tests run on.
type backend struct {
	name    string
	dialect sqlstore.Dialect
	open    func(t testing.TB) *sql.DB
}

// backends: SQLite always (a temporary file), PostgreSQL and MySQL when
// SURELY_POSTGRES_URL and SURELY_MYSQL_URL point at a server.
var (
	sqliteBackend   = backend{"sqlite", sqlstore.SQLite, openSQLite}
	postgresBackend = backend{"postgres", sqlstore.Postgres, testsql.Postgres}
	mysqlBackend    = backend{"mysql", sqlstore.MySQL, testsql.MySQL}
	backends        = []backend{sqliteBackend, postgresBackend, mysqlBackend}
)

// sqliteDSN is the DSN the tests open SQLite files with: a busy timeout
// (required, see the package doc) and WAL, without _txlock=immediate (the
// store does not need it).
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
}

func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	return openSQLiteDSN(t, sqliteDSN(filepath.Join(t.TempDir(), "surely.db")))
}

func openSQLiteDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// forEach runs fn as a parallel subtest per backend.
func forEach(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// quote quotes a (validated) identifier for d.
func quote(d sqlstore.Dialect, name string) string {
	if d == sqlstore.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// rebind turns "?" placeholders into $n for PostgreSQL.
func rebind(d sqlstore.Dialect, q string) string {
	if d != sqlstore.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// dropTable drops a table of the test's own when the test ends.
func dropTable(t testing.TB, db *sql.DB, d sqlstore.Dialect, table string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quote(d, table)); err != nil {
			t.Errorf("drop test table %s: %v", table, err)
		}
	})
}

// newTable returns a fresh random table name, migrated, dropped at the end.
func newTable(t testing.TB, db *sql.DB, d sqlstore.Dialect) string {
	t.Helper()
	table := "surely_test_" + randomHex(6)
	s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
	require.NoError(t, err)
	dropTable(t, db, d, table)
	require.NoError(t, s.Migrate(t.Context()))
	return table
}

// newStore returns a store on a fresh table of its own.
func newStore(t testing.TB, db *sql.DB, d sqlstore.Dialect, opts ...idempotency.Option) *sqlstore.Store {
	t.Helper()
	table := newTable(t, db, d)
	s, err := sqlstore.New(db, d, append([]idempotency.Option{sqlstore.WithTable(table)}, opts...)...)
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) {
	all := append(backends[:len(backends):len(backends)], backend{
		// The same file opened with _txlock=immediate, as many SQLite
		// users do: the store works either way.
		name: "sqlite-txlock-immediate", dialect: sqlstore.SQLite,
		open: func(t testing.TB) *sql.DB {
			return openSQLiteDSN(t, sqliteDSN(filepath.Join(t.TempDir(), "surely.db"))+"&_txlock=immediate")
		},
	})
	for _, b := range all {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			table := newTable(t, db, b.dialect)
			const retention = time.Hour
			idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
				// A store per subtest on the shared table: each moves its own
				// view of the database clock, in its own namespace.
				s, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table), idempotency.WithRetention(retention))
				require.NoError(t, err)
				return idempotencytest.Harness{
					Store:     s,
					Advance:   func(_ *testing.T, d time.Duration) { sqlstore.AdvanceClock(s, d) },
					Lease:     10 * time.Second,
					Retention: retention,
				}
			})
		})
	}
}

// The lease runs on the database clock, for real: no skew, a short lease,
// a real wait.
func TestLeaseExpiresOnDatabaseClock(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		s := newStore(t, b.open(t), b.dialect)
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: 300 * time.Millisecond, MaxAttempts: 3}
		res, err := s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		// The database runs on this machine: its clock agrees with ours.
		require.WithinDuration(t, time.Now().Add(req.Lease), res.Lease.Until, 2*time.Second)

		res2, err := s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.InProgress, res2.Status)

		time.Sleep(time.Until(res.Lease.Until) + 100*time.Millisecond)
		res3, err := s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res3.Status)
		require.Equal(t, idempotency.ResultUnknown, res3.Previous)
		require.Equal(t, 2, res3.Lease.Attempt)
	})
}

func TestNewValidatesOptions(t *testing.T) {
	db := openSQLite(t)
	for name, tc := range map[string]struct {
		db      *sql.DB
		dialect sqlstore.Dialect
		opts    []idempotency.Option
	}{
		"nil db":              {nil, sqlstore.SQLite, nil},
		"zero dialect":        {db, 0, nil},
		"unknown dialect":     {db, 42, nil},
		"empty table":         {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable("")}},
		"quote in table":      {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable(`t"; DROP TABLE x; --`)}},
		"upper case table":    {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable("Inbox")}},
		"dotted table":        {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable("public.inbox")}},
		"leading digit":       {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable("1inbox")}},
		"table too long":      {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable(strings.Repeat("t", 49))}},
		"zero retention":      {db, sqlstore.SQLite, []idempotency.Option{idempotency.WithRetention(0)}},
		"sub-ms retention":    {db, sqlstore.SQLite, []idempotency.Option{idempotency.WithRetention(time.Microsecond)}},
		"negative retention":  {db, sqlstore.SQLite, []idempotency.Option{idempotency.WithRetention(-time.Hour)}},
		"nil logger":          {db, sqlstore.SQLite, []idempotency.Option{idempotency.WithLogger(nil)}},
		"second option fails": {db, sqlstore.SQLite, []idempotency.Option{sqlstore.WithTable("ok"), sqlstore.WithTable("NOT OK")}},
	} {
		_, err := sqlstore.New(tc.db, tc.dialect, tc.opts...)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
	}
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(strings.Repeat("t", 48)),
		idempotency.WithRetention(time.Millisecond), idempotency.WithLogger(slog.Default()))
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("t", 48), sqlstore.Table(s))
	s, err = sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.Equal(t, sqlstore.DefaultTable, sqlstore.Table(s))
}

// New touches nothing: no table until Migrate, which is idempotent.
func TestMigrate(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		table := "surely_test_" + randomHex(6)
		dropTable(t, db, b.dialect, table)
		s, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table))
		require.NoError(t, err)
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 3}
		_, err = s.Claim(t.Context(), req)
		require.Error(t, err, "New must not create the table")

		require.NoError(t, s.Migrate(t.Context()))
		res, err := s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.NoError(t, s.Complete(t.Context(), res.Lease, idempotency.Outcome{}))
		require.NoError(t, s.Migrate(t.Context()), "Migrate again")
		rec, err := s.Get(t.Context(), "ns", "k")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateDone, rec.State, "a second Migrate keeps the records")
	})
}

// splitSchema splits a schema file the way an operator's tool would see
// it: comment lines dropped, statements separated by ";".
func splitSchema(file string) []string {
	var lines []string
	for line := range strings.Lines(file) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	var out []string
	for _, stmt := range strings.Split(strings.Join(lines, ""), ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}

// The schema files shipped for operators are what Migrate runs.
func TestSchemaFilesAreWhatMigrateRuns(t *testing.T) {
	for _, b := range backends {
		file, err := os.ReadFile(filepath.Join("schema", sqldialect.Name(int(b.dialect))+".sql"))
		require.NoError(t, err)
		stmts := splitSchema(string(file))
		require.Len(t, stmts, map[sqlstore.Dialect]int{sqlstore.Postgres: 7, sqlstore.MySQL: 5, sqlstore.SQLite: 7}[b.dialect], b.name)
		require.Equal(t, stmts, sqlstore.DDL(b.dialect, sqlstore.DefaultTable), b.name)

		custom := sqlstore.DDL(b.dialect, "my_inbox")
		require.Len(t, custom, len(stmts))
		for i, stmt := range custom {
			require.Equal(t, strings.ReplaceAll(stmts[i], "surely_inbox", "my_inbox"), stmt)
			require.NotContains(t, stmt, "surely_inbox")
			require.Contains(t, stmt, "my_inbox")
		}
	}
}

// A table made by applying the schema file by hand serves the store, and
// Migrate on it changes nothing.
func TestSchemaFileAppliedByHand(t *testing.T) {
	db := openSQLite(t)
	file, err := os.ReadFile(filepath.Join("schema", "sqlite.sql"))
	require.NoError(t, err)
	for _, stmt := range splitSchema(string(file)) {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err)
	}
	var before string
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT group_concat(sql, ';') FROM sqlite_master").Scan(&before))
	s, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	var after string
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT group_concat(sql, ';') FROM sqlite_master").Scan(&after))
	require.Equal(t, before, after)

	res, err := s.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
}

// Keys are compared byte for byte in every dialect: case, trailing spaces
// and Unicode normalization make different keys (MySQL's usual collations
// would merge them).
func TestKeysCompareByteForByte(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		s := newStore(t, b.open(t), b.dialect)
		keys := []string{"k", "K", "k ", "k  ", "é", "e\u0301", "ß", "ss", strings.Repeat("ü", defaults.MaxKeyLen/2)}
		for i, key := range keys {
			res, err := s.Claim(t.Context(), idempotency.ClaimRequest{
				Namespace: "ns", Key: key, Fingerprint: fmt.Sprint("fp-", i), Lease: time.Minute, MaxAttempts: 1,
			})
			require.NoError(t, err, "key %q", key)
			require.Equal(t, idempotency.Acquired, res.Status, "key %q is its own record", key)
		}
		for i, key := range keys {
			rec, err := s.Get(t.Context(), "ns", key)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint("fp-", i), rec.Fingerprint, "key %q", key)
		}
		_, err := s.Get(t.Context(), "NS", "k")
		require.ErrorIs(t, err, idempotency.ErrNotFound, "namespaces are case sensitive")
	})
}

func TestFingerprintLimit(t *testing.T) {
	s := newStore(t, openSQLite(t), sqlstore.SQLite)
	req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: strings.Repeat("f", sqlstore.MaxFingerprintLen+1), Lease: time.Minute, MaxAttempts: 1}
	_, err := s.Claim(t.Context(), req)
	require.ErrorIs(t, err, idempotency.ErrInvalidRequest)
	req.Fingerprint = req.Fingerprint[1:]
	res, err := s.Claim(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
}

// Purge deletes what the retention forgot, and nothing else.
func TestPurge(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		s := newStore(t, db, b.dialect, idempotency.WithRetention(time.Hour))
		ctx := t.Context()
		claim := func(key string, lease time.Duration) idempotency.Lease {
			res, err := s.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: lease, MaxAttempts: 5})
			require.NoError(t, err)
			require.Equal(t, idempotency.Acquired, res.Status)
			return res.Lease
		}
		require.NoError(t, s.Complete(ctx, claim("done", time.Minute), idempotency.Outcome{}))
		require.NoError(t, s.Release(ctx, claim("failed", time.Minute), idempotency.Failure{Error: "x"}))
		claim("abandoned", time.Minute)
		claim("leased", 10*time.Hour)

		n, err := s.Purge(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing expired yet")

		sqlstore.AdvanceClock(s, 2*time.Hour)
		n, err = s.Purge(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		rec, err := s.Get(ctx, "ns", "leased")
		require.NoError(t, err, "a live lease is kept")
		require.Equal(t, idempotency.StateInProgress, rec.State)
		n, err = s.Purge(ctx)
		require.NoError(t, err)
		require.Zero(t, n)

		var rows int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quote(b.dialect, sqlstore.Table(s))).Scan(&rows))
		require.Equal(t, 1, rows)
	})
}

// Purge works in batches until nothing expired is left.
func TestPurgeBatches(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db, sqlstore.SQLite)
	// 2500 expired rows, written directly.
	_, err := db.ExecContext(t.Context(), `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2500)
		INSERT INTO `+quote(sqlstore.SQLite, sqlstore.Table(s))+` SELECT 'ns', 'k'||i, 'done', 'fp', 't', 1, 0, 0, 1, 1, '{}', '[]', '', 0, 0, 0 FROM n`)
	require.NoError(t, err)
	n, err := s.Purge(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2500, n)
}
