package sqlstore_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// TestMySQLReadCommittedSessionsNeedNoSetTransaction: the store's
// transactions must be READ COMMITTED on MySQL. When the DSN makes the
// sessions READ COMMITTED already, the store learns it from the session
// (one probe) and begins its transactions with the driver's defaults,
// saving go-sql-driver's SET TRANSACTION round trip per transaction;
// otherwise every transaction asks for READ COMMITTED. SQLite runs the
// driver's defaults without a probe.
func TestMySQLReadCommittedSessionsNeedNoSetTransaction(t *testing.T) {
	claim := func(t *testing.T, s *sqlstore.Store) {
		t.Helper()
		_, err := s.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 3})
		require.NoError(t, err)
	}
	sessionLevel := func(t *testing.T, db *sql.DB) string {
		t.Helper()
		var level string
		err := db.QueryRowContext(t.Context(), "SELECT @@SESSION.transaction_isolation").Scan(&level)
		if err != nil { // MariaDB before 11.1
			require.NoError(t, db.QueryRowContext(t.Context(), "SELECT @@SESSION.tx_isolation").Scan(&level))
		}
		return strings.ToUpper(level)
	}

	t.Run("mysql/dsn-default", func(t *testing.T) {
		db := testsql.MySQL(t)
		db.SetMaxOpenConns(1) // the probe and the claims share the one session
		s := newStore(t, db, sqlstore.MySQL)
		claim(t, s)
		want := sql.LevelReadCommitted
		if sessionLevel(t, db) == "READ-COMMITTED" { // a server configured so
			want = sql.LevelDefault
		}
		require.Equal(t, want, sqlstore.TxIsolation(s))
	})
	t.Run("mysql/dsn-read-committed", func(t *testing.T) {
		cfg, err := mysql.ParseDSN(testenv.URL(t, "SURELY_MYSQL_URL"))
		require.NoError(t, err)
		var db *sql.DB
		for _, name := range []string{"transaction_isolation", "tx_isolation"} {
			c := cfg.Clone()
			c.Params = map[string]string{name: "'READ-COMMITTED'"}
			conn, err := mysql.NewConnector(c)
			require.NoError(t, err)
			candidate := sql.OpenDB(conn)
			if candidate.PingContext(t.Context()) == nil {
				db = candidate
				break
			}
			_ = candidate.Close()
		}
		require.NotNil(t, db, "no DSN variable sets the session isolation on this server")
		t.Cleanup(func() { _ = db.Close() })
		require.Equal(t, "READ-COMMITTED", sessionLevel(t, db))
		s := newStore(t, db, sqlstore.MySQL)
		claim(t, s)
		require.Equal(t, sql.LevelDefault, sqlstore.TxIsolation(s),
			"sessions READ COMMITTED by the DSN: the transactions need no SET TRANSACTION")
	})
	t.Run("sqlite", func(t *testing.T) {
		s := newStore(t, openSQLite(t), sqlstore.SQLite)
		claim(t, s)
		require.Equal(t, sql.LevelDefault, sqlstore.TxIsolation(s))
	})
}
