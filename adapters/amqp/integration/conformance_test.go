// Package integration_test runs the conformance suite (adapters/adaptertest)
// on adapters/amqp. It lives apart from the adapter's own tests because the
// suite links a SQLite driver for its default shared store: "go mod tidy" in
// a module that imports adapters/amqp loads the adapter's tests and records
// every module they import in that module's go.sum, but never loads this
// package (nothing imports it). internal/tidycheck checks it.
package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testamqp"
	"github.com/surely-dev/surely/internal/testenv"
)

// conformanceAckWait only sizes the suite's waits: RabbitMQ has no ack
// wait (an unacked delivery stays with its consumer until the consumer's
// channel closes, or consumer_timeout passes), so a waiting period longer
// than this proves nothing more.
const conformanceAckWait = 500 * time.Millisecond

// conformanceCloseTimeout is the close timeout of the suite's subscribers
// (Features.CloseTimeout).
const conformanceCloseTimeout = 2 * time.Second

func TestMain(m *testing.M) {
	// The conformance suite's crash test, over TestConformance's store.
	adaptertest.RunChild(newChildSubscriber, adaptertest.WithSharedStore(redisSharedStore))
	goleak.VerifyTestMain(m)
}

func randomName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, newConformanceAdapter, adaptertest.Features{
		DeliveryCount:  true,  // quorum queues' x-delivery-count
		NackDelay:      false, // AMQP 0-9-1 requeues at once
		LeaseExtension: false, // nothing to extend: no ack deadline
		AckWait:        conformanceAckWait,
		CloseTimeout:   conformanceCloseTimeout,
		// The crash test's processes share Redis here, not the default
		// SQLite file: the suite runs on the store surely is used with
		// most, and a SharedStore of an adapter's own stays tested.
		SharedStore: &redisSharedStore,
	})
}

// redisSharedStore is idempotency/redisstore on SURELY_REDIS_URL, under a
// key prefix of each crash test's own (its location: "<prefix> <url>"),
// whose keys are deleted when the test ends.
var redisSharedStore = adaptertest.SharedStore{
	Name: "redis",
	Create: func(t testing.TB) string {
		rdb := testenv.Redis(t)
		prefix := "surely-adaptertest:" + randomName(t) + ":"
		// Registered after testenv.Redis's cleanup, which closes rdb: runs
		// before it.
		t.Cleanup(func() { deleteKeys(t, rdb, prefix) })
		return prefix + " " + testenv.URL(t, "SURELY_REDIS_URL")
	},
	Open: func(ctx context.Context, location string) (idempotency.Store, func() error, error) {
		prefix, url, ok := strings.Cut(location, " ")
		if !ok {
			return nil, nil, fmt.Errorf("location %q: want \"<prefix> <url>\"", location)
		}
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, err
		}
		rdb := redis.NewClient(opt)
		store, err := redisstore.New(ctx, rdb, redisstore.WithPrefix(prefix))
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		return store, rdb.Close, nil
	},
}

// deleteKeys deletes every key under prefix (SCAN + DEL, never FLUSH).
func deleteKeys(t testing.TB, rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for range 10_000 {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 500).Result()
		if err != nil {
			t.Errorf("cleanup: SCAN %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup: DEL: %v", err)
				return
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// newChildSubscriber builds the crash test's subscribers in a child
// process. A queue has one group of competing consumers: group is not
// needed (every test of the suite has its own topic).
func newChildSubscriber(string) (message.Subscriber, error) {
	return surelyamqp.NewSubscriber(os.Getenv("SURELY_AMQP_URL"))
}

type conformanceAdapter struct {
	url   string
	admin *amqp.Connection
}

func newConformanceAdapter(t *testing.T) adaptertest.Adapter {
	url := testamqp.URL(t)
	admin, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	return &conformanceAdapter{url: url, admin: admin}
}

// NewTopic declares a queue of the test's own, deleted when the test ends.
func (a *conformanceAdapter) NewTopic(t *testing.T) string {
	topic := "surely_conformance_" + randomName(t)
	ch, err := a.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclare(topic, true, false, false, false, surelyamqp.QueueArguments())
	require.NoError(t, err)
	t.Cleanup(func() {
		ch, err := a.admin.Channel()
		if err != nil {
			t.Errorf("delete queue %s: %v", topic, err)
			return
		}
		defer func() { _ = ch.Close() }()
		if _, err := ch.QueueDelete(topic, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", topic, err)
		}
	})
	return topic
}

func (a *conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	p, err := surelyamqp.NewPublisher(a.url)
	require.NoError(t, err)
	return p
}

// NewSubscriber returns a competing consumer of the topic's queue; see
// newChildSubscriber for the group.
func (a *conformanceAdapter) NewSubscriber(t *testing.T, _ string) message.Subscriber {
	s, err := surelyamqp.NewSubscriber(a.url, delivery.WithCloseTimeout(conformanceCloseTimeout))
	require.NoError(t, err)
	return s
}

// PublishMalformed publishes a message with a table in a header, which
// Watermill's string metadata cannot hold.
func (a *conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	body := []byte("raw \x00 malformed")
	ch, err := a.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", topic, false, false, amqp.Publishing{
		Body: body, DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"idempotency_key": "order-malformed", "nested": amqp.Table{"a": int32(1)}},
	})
	require.NoError(t, err)
	ok, err := dc.WaitContext(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	return body
}

func (a *conformanceAdapter) ChildEnv() []string { return []string{"SURELY_AMQP_URL=" + a.url} }
