// Package testsql opens the SQL databases that integration tests run
// against (SURELY_POSTGRES_URL, SURELY_MYSQL_URL). It is apart from testenv
// so that only the tests that need them link the drivers.
package testsql

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/surely-dev/surely/internal/testenv"
)

// Postgres opens the PostgreSQL database of SURELY_POSTGRES_URL (e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and pings it. The
// pool is closed when the test ends. Tests must create their own randomly
// named tables, drop them, and never touch anything else on the server.
func Postgres(t testing.TB) *sql.DB {
	t.Helper()
	url := testenv.URL(t, "SURELY_POSTGRES_URL")
	db, err := OpenPostgres(url)
	if err != nil {
		t.Fatalf("SURELY_POSTGRES_URL=%q: %v", url, err)
	}
	return pinged(t, db, "PostgreSQL", url)
}

// MySQL opens the MySQL or MariaDB database of SURELY_MYSQL_URL (a
// go-sql-driver DSN, e.g. root@tcp(127.0.0.1:3306)/test) and pings it. The
// pool is closed when the test ends. Tests must create their own randomly
// named tables, drop them, and never touch anything else on the server.
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	dsn := testenv.URL(t, "SURELY_MYSQL_URL")
	db, err := OpenMySQL(dsn)
	if err != nil {
		t.Fatalf("SURELY_MYSQL_URL=%q: %v", dsn, err)
	}
	return pinged(t, db, "MySQL", dsn)
}

func pinged(t testing.TB, db *sql.DB, name, url string) *sql.DB {
	t.Helper()
	// The shared servers serve every test package at once: stay well under
	// their connection limits (PostgreSQL's default is 100).
	db.SetMaxOpenConns(20)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		testenv.Unavailable(t, fmt.Sprintf("%s at %s does not answer: %v", name, url, err))
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// OpenMySQL opens a pool on a go-sql-driver DSN without connecting; for
// child processes of crash tests, which have no testing.TB.
func OpenMySQL(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// OpenPostgres opens a pool on a PostgreSQL URL without connecting; for
// child processes of crash tests, which have no testing.TB.
func OpenPostgres(url string) (*sql.DB, error) {
	return sql.Open("pgx", url)
}
