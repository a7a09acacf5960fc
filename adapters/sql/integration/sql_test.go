// Package integration_test runs the conformance suite (adapters/adaptertest)
// on adapters/sql. It lives apart from the adapter's own tests because the
// suite links a SQLite driver for its default shared store: "go mod tidy" in
// a module that imports adapters/sql loads the adapter's tests and records
// every module they import in that module's go.sum, but never loads this
// package (nothing imports it). internal/tidycheck checks it.
package integration_test

import (
	"context"
	"crypto/rand"
	stdsql "database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelysql "github.com/surely-dev/surely/adapters/sql"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/testsql"
)

func TestMain(m *testing.M) {
	adaptertest.RunChild(newChildSubscriber) // the conformance suite's crash-test children
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

// newChildSubscriber builds a crash-test child's subscriber on
// SURELY_POSTGRES_URL. The child is killed, never closed: so is its pool.
func newChildSubscriber(group string) (message.Subscriber, error) {
	db, err := testsql.OpenPostgres(os.Getenv("SURELY_POSTGRES_URL"))
	if err != nil {
		return nil, err
	}
	return surelysql.NewSubscriber(db, group, testOptions()...)
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
	_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+messagesTable(topic)+", "+
		wmsql.DefaultPostgreSQLOffsetsAdapter{}.MessagesOffsetsTable(topic))
	if err != nil {
		t.Errorf("drop the tables of %s: %v", topic, err)
	}
}

// messagesTable returns the quoted name of topic's messages table.
func messagesTable(topic string) string { return wmsql.DefaultPostgreSQLSchema{}.MessagesTable(topic) }
