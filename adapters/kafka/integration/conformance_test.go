package integration_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelykafka "github.com/surely-dev/surely/adapters/kafka"
	"github.com/surely-dev/surely/delivery"
)

// conformanceFeatures: Kafka reports no delivery count, cannot delay one
// message's redelivery (a nack is an in-process resend by watermill-kafka)
// and has no per-message deadline to extend: a partition stays with its
// consumer while the consumer's session lives, however long a handler
// runs. AckWait sizes the tests; a dead consumer's partitions move on
// after its session timeout (6 s in fastGroupConfig).
var conformanceFeatures = adaptertest.Features{
	CloseTimeout: conformanceCloseTimeout,
	PubSub: &tests.Features{
		ConsumerGroups: true,
		Persistent:     true,
	},
	PubSubSkip: map[string]string{
		"TestMessageCtx": "Subscriber.Close drains: it waits up to its close timeout for the messages in flight " +
			"to be acked or nacked before it cancels their contexts; Watermill expects them cancelled at once",
	},
}

// conformanceCloseTimeout is the close timeout of the suite's subscribers
// (Features.CloseTimeout).
const conformanceCloseTimeout = 2 * time.Second

func TestConformance(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t)
	topics := &topicMaker{brokers: brokers}
	adaptertest.Run(t, func(t *testing.T) adaptertest.Adapter {
		return &conformanceAdapter{brokers: brokers, topics: topics}
	}, conformanceFeatures)
}

// conformanceAdapter serves the suite from one kfake cluster: each test
// gets topics of its own, with 4 partitions.
type conformanceAdapter struct {
	brokers []string
	topics  *topicMaker
}

func (a *conformanceAdapter) NewTopic(t *testing.T) string { return newTopic(t, a.brokers) }

func (a *conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	pub, err := surelykafka.NewPublisher(a.brokers)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return topicCreatingPublisher{Publisher: pub, topics: a.topics}
}

func (a *conformanceAdapter) NewSubscriber(t *testing.T, group string) message.Subscriber {
	sub, err := surelykafka.NewSubscriber(a.brokers, group, surelykafka.WithSaramaConfig(fastGroupConfig),
		delivery.WithCloseTimeout(conformanceCloseTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return topicCreatingSubscriber{Subscriber: sub, topics: a.topics}
}

// topicMaker creates the topics that Watermill's universal tests derive
// from NewTopic's (topic + "-" + test ID) before their first use: the
// adapter never creates a topic by itself (EnsureTopic does, explicitly).
type topicMaker struct {
	brokers []string
	mu      sync.Mutex
	made    map[string]bool
}

func (m *topicMaker) ensure(topic string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.made[topic] {
		return nil
	}
	admin, err := sarama.NewClusterAdmin(m.brokers, sarama.NewConfig())
	if err != nil {
		return err
	}
	defer func() { _ = admin.Close() }()
	if err := surelykafka.EnsureTopic(admin, topic, sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: 1}); err != nil {
		return err
	}
	if m.made == nil {
		m.made = map[string]bool{}
	}
	m.made[topic] = true
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

// PublishMalformed publishes a record with two values for one header, which
// the default marshaler refuses to collapse.
func (a *conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	cfg := sarama.NewConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(a.brokers, cfg)
	require.NoError(t, err)
	defer func() { _ = p.Close() }()
	raw := []byte("raw \x00 bytes")
	_, _, err = p.SendMessage(&sarama.ProducerMessage{
		Topic: topic,
		Value: sarama.ByteEncoder(raw),
		Headers: []sarama.RecordHeader{
			{Key: []byte("k"), Value: []byte("a")},
			{Key: []byte("k"), Value: []byte("b")},
		},
	})
	require.NoError(t, err)
	return raw
}

func (a *conformanceAdapter) ChildEnv() []string {
	return []string{brokersEnv + "=" + strings.Join(a.brokers, ",")}
}
