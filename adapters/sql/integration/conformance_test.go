package integration_test

import (
	"context"
	stdsql "database/sql"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelysql "github.com/surely-dev/surely/adapters/sql"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/testsql"
)

// conformanceFeatures: no delivery count (watermill-sql keeps none), no
// per-message nack delay (a nacked message is resent after a fixed
// ResendInterval), and lease extension: the Subscriber's AckDeadline
// (AckWait here) is pushed back by surely's dedup step.
//
// Messages: a consumer group takes one message at a time (one transaction
// per message; its consumers take turns on the group's offsets row), and
// each nack waits the resend interval (100ms) inside its transaction: 2,000
// messages with 10% nacks took 41s under -race alone, of the load test's
// 90s. 1,000 keep a margin when CI runs other packages beside it.
//
// Watermill's universal tests pass too (SURELY_SQL_PUBSUB=1 runs them,
// 133s under -race: TestConcurrentSubscribe alone 108s), too slow for
// every run for the same reason.
// conformanceCloseTimeout is the close timeout of the suite's subscribers
// (Features.CloseTimeout).
const conformanceCloseTimeout = 2 * time.Second

var conformanceFeatures = adaptertest.Features{
	LeaseExtension: true,
	AckWait:        testAckWait,
	CloseTimeout:   conformanceCloseTimeout,
	Messages:       1000,
	PubSub: watermillFeatures(&tests.Features{
		ConsumerGroups:      true,
		ExactlyOnceDelivery: false,
		GuaranteedOrder:     true,
		Persistent:          true,
	}),
	PubSubSkip: map[string]string{
		"TestMessageCtx": "Subscriber.Close drains: it waits up to its close timeout for the message in flight " +
			"to be acked or nacked before it cancels its context; Watermill expects it cancelled at once",
		"TestContinueAfterSubscribeClose": "Subscriber.Close drains (see TestMessageCtx): each of its closes with " +
			"a message in flight waits its close timeout; and its 5,000 messages take too long with a batch size of 1",
		"TestPublisherClose": "10,000 messages with a batch size of 1 (one transaction per message) exceed its 45s under -race",
	},
}

// watermillFeatures returns f, Watermill's universal tests to run, only when
// SURELY_SQL_PUBSUB=1 (see conformanceFeatures).
func watermillFeatures(f *tests.Features) *tests.Features {
	if os.Getenv("SURELY_SQL_PUBSUB") == "1" {
		return f
	}
	return nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	testsql.Postgres(t) // skips (fails under SURELY_REQUIRE_SERVICES=1) without a database
	adaptertest.Run(t, func(t *testing.T) adaptertest.Adapter {
		// A pool per test: a subscription holds a connection while its
		// message is in flight.
		db := testsql.Postgres(t)
		return &conformanceAdapter{db: db, topics: &topicMaker{db: db, t: t}}
	}, conformanceFeatures)
}

// conformanceAdapter serves the suite from the database of
// SURELY_POSTGRES_URL: each topic gets tables of its own, dropped when the
// test ends.
type conformanceAdapter struct {
	db     *stdsql.DB
	topics *topicMaker
}

func (a *conformanceAdapter) NewTopic(t *testing.T) string {
	topic := randomTopic()
	createTopic(t, a.db, topic)
	return topic
}

func (a *conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	pub, err := surelysql.NewPublisher(a.db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return topicCreatingPublisher{Publisher: pub, topics: a.topics}
}

func (a *conformanceAdapter) NewSubscriber(t *testing.T, group string) message.Subscriber {
	sub, err := surelysql.NewSubscriber(a.db, group, testOptions(delivery.WithCloseTimeout(conformanceCloseTimeout))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return topicCreatingSubscriber{Subscriber: sub, topics: a.topics}
}

// PublishMalformed inserts a row whose metadata is JSON but not an object of
// strings, which no Watermill message can hold.
func (a *conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	raw := []byte("raw \x00 bytes")
	_, err := a.db.ExecContext(t.Context(), `INSERT INTO `+messagesTable(topic)+
		` (uuid, payload, metadata, transaction_id) VALUES ($1, $2, $3, pg_current_xact_id())`,
		"malformed-1", raw, `{"attempt": 1}`)
	require.NoError(t, err)
	return raw
}

func (a *conformanceAdapter) ChildEnv() []string { return nil } // SURELY_POSTGRES_URL is inherited

// topicMaker creates the tables of the topics that Watermill's universal
// tests derive from NewTopic's before their first use (the adapter never
// creates tables by itself), and drops them when its test ends.
type topicMaker struct {
	db   *stdsql.DB
	t    *testing.T
	mu   sync.Mutex
	made map[string]bool
}

func (m *topicMaker) ensure(topic string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.made[topic] {
		return nil
	}
	if err := surelysql.InitializeSchema(context.Background(), m.db, topic); err != nil {
		return err
	}
	if m.made == nil {
		m.made = map[string]bool{}
	}
	m.made[topic] = true
	m.t.Cleanup(func() { dropTopic(m.t, m.db, topic) })
	return nil
}

type topicCreatingPublisher struct {
	message.Publisher
	topics *topicMaker
}

func (p topicCreatingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.topics.ensure(topic); err != nil {
		return err
	}
	return p.Publisher.Publish(topic, msgs...)
}

type topicCreatingSubscriber struct {
	message.Subscriber
	topics *topicMaker
}

func (s topicCreatingSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.topics.ensure(topic); err != nil {
		return nil, err
	}
	return s.Subscriber.Subscribe(ctx, topic)
}
