package sqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// With go-sql-driver's clientFoundRows a row that was already there counts
// as affected: the one-transaction inbox must not take an existing record
// for its own fresh claim, or a duplicate first delivery runs the effect
// again.
func TestInboxInTxDuplicateWithClientFoundRows(t *testing.T) {
	t.Parallel()
	dsn := testenv.URL(t, "SURELY_MYSQL_URL")
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := testsql.OpenMySQL(dsn + sep + "clientFoundRows=true")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(t.Context()))
	b := backend{name: "mysql-found-rows", dialect: sqlstore.MySQL, open: func(testing.TB) *sql.DB { return db }}
	e := setupInbox(t, b)
	var calls atomic.Int32
	h := e.inTxChain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, e.effect(ctx, tx, msg)
	})
	for range 3 {
		_, err := h(counted(delivery("order-1", "pay 10"), 1))
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), calls.Load(), "a duplicate first delivery is answered from the DONE record")
	require.Equal(t, 1, e.count(t, "order-1"), "one effect")
}
