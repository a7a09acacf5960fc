package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// The payment and its DONE mark commit in one transaction; the redelivery
// of the same operation is acked as a duplicate without paying again.
func Example_transactionalInbox() {
	dir, err := os.MkdirTemp("", "surely-example")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// modernc.org/sqlite; a busy timeout is required, WAL recommended.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	defer func() { _ = db.Close() }() // the store never closes it
	ctx := context.Background()

	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (order_id TEXT PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		panic(err)
	}

	pay := func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO payments (order_id, amount) VALUES (?, 10)`, idempotency.KeyFrom(ctx))
		return nil, err
	}
	dead := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = dead.Close() }()
	h, err := handler.New(store.Inbox(pay),
		handler.WithStore(store, "payments"),
		handler.WithDeadLetter(dead, "payments.dead"))
	if err != nil {
		panic(err)
	}

	for range 2 { // a delivery and its redelivery
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"order-42","amount":10}`))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, "order-42")
		_, err := h(msg)
		fmt.Println("acked:", err == nil)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM payments`).Scan(&n); err != nil {
		panic(err)
	}
	rec, err := store.Get(ctx, "payments", "order-42")
	if err != nil {
		panic(err)
	}
	fmt.Println("payments:", n)
	fmt.Println("record:", rec.State, "after", rec.Attempts, "attempt")
	// Output:
	// acked: true
	// acked: true
	// payments: 1
	// record: done after 1 attempt
}
