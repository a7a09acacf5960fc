package sql_test

import (
	"context"
	"crypto/rand"
	stdsql "database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	surelysql "github.com/surely-dev/surely/adapters/sql"
	"github.com/surely-dev/surely/delivery"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Timings of the subscribers in the tests: a short ack wait, and a poll
// interval that keeps an idle topic's latency low.
const (
	testAckWait      = time.Second
	testPollInterval = 50 * time.Millisecond
)

// testOptions returns the options of a test subscriber, then more, which
// override them.
func testOptions(more ...delivery.Option) []delivery.Option {
	return append([]delivery.Option{delivery.WithAckWait(testAckWait), surelysql.WithPollInterval(testPollInterval)}, more...)
}

// randomTopic returns a short random topic: Watermill's universal tests
// append "-", a 36-byte UUID and sometimes "-1" to it, within the 45 bytes
// a topic may have.
func randomTopic() string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// createTopic creates topic's tables, dropped when t ends.
func createTopic(t testing.TB, db *stdsql.DB, topic string) {
	t.Helper()
	require.NoError(t, surelysql.InitializeSchema(t.Context(), db, topic))
	t.Cleanup(func() { dropTopic(t, db, topic) })
}

func dropTopic(t testing.TB, db *stdsql.DB, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+surelysql.MessagesTable(topic)+", "+surelysql.OffsetsTable(topic))
	if err != nil {
		t.Errorf("drop the tables of %s: %v", topic, err)
	}
}
