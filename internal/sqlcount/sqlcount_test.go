package sqlcount_test

import (
	"context"
	"database/sql"
	"net"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/surely-dev/surely/internal/sqlcount"
)

func TestCountsTransactionsAndStatements(t *testing.T) {
	t.Parallel()
	probe, err := sql.Open("sqlite", "")
	if err != nil {
		t.Fatal(err)
	}
	drv := probe.Driver()
	_ = probe.Close()
	kc, err := sqlcount.DriverConnector(drv, "file:"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	var c sqlcount.Counter
	db := sql.OpenDB(c.Connector(kc))
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()

	if _, err := db.ExecContext(ctx, `CREATE TABLE t (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO t (k) VALUES (?)`, "a"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback() // after Commit: never reaches the driver
	st, err := db.PrepareContext(ctx, `SELECT COUNT(*) FROM t WHERE k = ?`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if err := st.QueryRowContext(ctx, "a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, %v", n, err)
	}

	got := c.Snapshot()
	want := sqlcount.Counts{Begins: 1, Commits: 1, Execs: 2, Queries: 2, Prepares: 1, Autocommits: 2}
	if got != want {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}
	if s, x := got.Statements(), got.Transactions(); s != 6 || x != 3 {
		t.Fatalf("statements, transactions = %d, %d, want 6, 3", s, x)
	}
}

func TestDialCountsRoundTrips(t *testing.T) {
	t.Parallel()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() { // echoes each read back
		s, err := l.Accept()
		if err != nil {
			return
		}
		defer func() { _ = s.Close() }()
		buf := make([]byte, 64)
		for {
			n, err := s.Read(buf)
			if err != nil {
				return
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	var c sqlcount.Counter
	nc, err := c.Dial(nil)(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	buf := make([]byte, 1)
	for range 3 {
		// Two writes, then two reads: one round trip.
		for _, b := range []byte("ab") {
			if _, err := nc.Write([]byte{b}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if _, err := nc.Read(buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := c.Snapshot().RoundTrips; got != 3 {
		t.Fatalf("round trips = %d, want 3", got)
	}
}
