package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// One option type configures the Extractor and every store: sqlstore.New
// refuses the options it does not use instead of ignoring them (WithClock
// too: its times come from the database's clock), and a nil option.
func TestNewRefusesOptionsItDoesNotTake(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	for name, opt := range map[string]idempotency.Option{
		"WithClock":        idempotency.WithClock(time.Now),
		"WithSources":      idempotency.WithSources(idempotency.FromUUID()),
		"WithPrefix":       redisstore.WithPrefix("x:"),
		"WithBatching":     redisstore.WithBatching(8),
		"WithWaitReplicas": redisstore.WithWaitReplicas(1, time.Second),
		"WithHashRecords":  redisstore.WithHashRecords(),
	} {
		_, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable("inbox"), opt)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
		require.ErrorContains(t, err, "sqlstore.New does not take option "+name)
	}
	_, err := sqlstore.New(db, sqlstore.SQLite, nil)
	require.ErrorIs(t, err, idempotency.ErrInvalidOption, "nil option")
}
