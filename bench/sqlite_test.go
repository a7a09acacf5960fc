package bench

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// surelySQLiteInbox is the transactional inbox of idempotency/sqlstore on
// a SQLite file in the run's temporary directory (WAL, busy timeout 5s,
// synchronous NORMAL: in WAL mode a commit then survives a crash of the
// process but not of the machine, and is not fsynced):
// handler.New(store.Inbox(fn), WithStore(store, ...), WithDeadLetter(...)).
// The business handler runs inside the transaction that writes the DONE
// mark; it runs no SQL of its own. SQLite serializes every write, so the
// 64 concurrent handlers of the router take turns.
func surelySQLiteInbox(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	return sqliteInbox(b, ps, fn, "NORMAL")
}

// surelySQLiteInboxFull is surelySQLiteInbox with synchronous FULL
// (SQLite's default): every commit is fsynced, so it survives a machine
// crash too.
func surelySQLiteInboxFull(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	return sqliteInbox(b, ps, fn, "FULL")
}

func sqliteInbox(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc, synchronous string) message.HandlerFunc {
	dsn := "file:" + filepath.Join(b.TempDir(), "inbox.db") +
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + synchronous + ")"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	// One connection: SQLite has one writer at a time anyway, and Go's
	// pool queues the others instead of SQLite's busy handler, which
	// sleeps (up to 100ms a try) while the lock is held.
	db.SetMaxOpenConns(1)
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	inbox := store.Inbox(func(_ context.Context, _ *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		return fn(msg)
	})
	return surelyChain(b, ps, inbox, store)
}
