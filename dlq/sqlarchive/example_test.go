package sqlarchive_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// An archive on SQLite: Migrate creates its tables; dead letters go in
// through Publish (or handler.WithDeadLetter / archive.Ingest) and come out
// filtered in SQL.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "dlq-example")
	defer func() { _ = os.RemoveAll(dir) }()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "dlq.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = db.Close() }() // yours: the archive never closes it

	arch, err := sqlarchive.New(db, sqlstore.SQLite)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := arch.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}

	for i, reason := range []dlq.Reason{dlq.ReasonExhausted, dlq.ReasonPermanent, dlq.ReasonExhausted} {
		src := message.NewMessage(fmt.Sprintf("order-%d", i), []byte("{}"))
		f := dlq.Failure{Reason: reason, Err: errors.New("warehouse unavailable"), Topic: "orders", Handler: "ship"}
		_ = arch.Publish("dead", dlq.Wrap(src, f, nil, "", ""))
	}

	st, _ := arch.Stats(ctx, archive.Filter{Topic: "orders"})
	fmt.Println("total:", st.Total, "exhausted:", st.ByReason["exhausted"])
	page, _ := arch.List(ctx, archive.Filter{Reason: dlq.ReasonExhausted}, archive.Page{Limit: 10})
	for _, e := range page {
		fmt.Println(e.Seq, e.Message.Metadata.Get(dlq.KeyOriginalUUID), e.Error)
	}
	// Output:
	// total: 3 exhausted: 2
	// 1 order-0 warehouse unavailable
	// 3 order-2 warehouse unavailable
}
