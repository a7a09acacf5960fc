package adaptertest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // driver "sqlite", pure Go: the default shared store needs no server

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// NewMemStore is the default of Features.NewStore: an idempotency/memstore
// of the test's own.
func NewMemStore(t testing.TB) idempotency.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatalf("memstore: %v", err)
	}
	return s
}

// SharedStore is a durable idempotency store that several processes open:
// the crash test's parent and its child consumers share their dedup records
// through it. Give the same SharedStore to Features.SharedStore (the
// parent's side) and to RunChild (the children's side); a child refuses a
// store created by a SharedStore of another Name.
type SharedStore struct {
	// Name tells shared stores apart ("sqlite" for SQLiteStore).
	Name string
	// Create runs in the parent, once per crash test: it makes an empty
	// store of the test's own (a temporary file, a key prefix, a schema)
	// and returns its location, the string that Open takes. What it makes
	// it removes in t.Cleanup. It may t.Skip when its server is missing.
	Create func(t testing.TB) (location string)
	// Open runs in the parent and in each child: it connects to the store
	// at location. close releases what Open made (connections), not the
	// records.
	Open func(ctx context.Context, location string) (store idempotency.Store, close func() error, err error)
}

// sqliteStoreName is SQLiteStore's Name.
const sqliteStoreName = "sqlite"

// SQLiteStore returns the default SharedStore: idempotency/sqlstore on a
// SQLite database in a file of the test's temporary directory
// (modernc.org/sqlite, WAL, a 5s busy timeout). It needs no server, and a
// process killed with SIGKILL leaves the file consistent (its locks go
// with it).
func SQLiteStore() SharedStore {
	return SharedStore{
		Name: sqliteStoreName,
		Create: func(t testing.TB) string {
			return "file:" + filepath.Join(t.TempDir(), "surely.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
		},
		Open: openSQLite,
	}
}

// openSQLite opens the SQLite store at dsn and creates its table unless it
// exists (parent and children may race to: CREATE ... IF NOT EXISTS under
// the busy timeout).
func openSQLite(ctx context.Context, dsn string) (idempotency.Store, func() error, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite %s: %w", dsn, err)
	}
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("sqlite store %s: %w", dsn, err)
	}
	return store, db.Close, nil
}

// sharedStore returns f's shared store, SQLiteStore by default.
func (f Features) sharedStore() SharedStore {
	if f.SharedStore != nil {
		return *f.SharedStore
	}
	return SQLiteStore()
}
