package kafka_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/stretchr/testify/require"

	surelykafka "github.com/surely-dev/surely/adapters/kafka"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

func TestSubscriberOptions(t *testing.T) {
	brokers := []string{"127.0.0.1:1"} // never dialled by the constructors

	for name, opts := range map[string][]delivery.Option{
		"nil marshaler":      {surelykafka.WithMarshaler(nil)},
		"nil Sarama config":  {surelykafka.WithSaramaConfig(nil)},
		"zero close timeout": {delivery.WithCloseTimeout(0)},
		"nil logger":         {delivery.WithLogger(nil)},
		"Sarama's own validation": {surelykafka.WithSaramaConfig(func(c *sarama.Config) {
			c.Consumer.Group.Heartbeat.Interval = c.Consumer.Group.Session.Timeout
		})},
		// Another adapter's WithMarshaler records a marshaler of its own
		// broker under its own name.
		"another package's marshaler": {options.Func[options.Delivery](func(s *options.Set) error { s.Put("nats.WithMarshaler", 42); return nil })},
		"a shared option not taken":   {delivery.WithConcurrency(2)},
		// An option of no adapter's Subscriber.
		"an option it does not take": {options.Func[options.Delivery](func(s *options.Set) error { s.Put("WithChannels", 2); return nil })},
	} {
		_, err := surelykafka.NewSubscriber(brokers, "g", opts...)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := surelykafka.NewSubscriber(brokers, "g", delivery.WithAckWait(time.Second))
	require.ErrorContains(t, err, "kafka.NewSubscriber does not take option WithAckWait")
	_, err = surelykafka.NewSubscriber(brokers, "")
	require.ErrorIs(t, err, delivery.ErrInvalidOption, "no consumer group")
	_, err = surelykafka.NewSubscriber(nil, "g")
	require.ErrorIs(t, err, delivery.ErrInvalidOption, "no brokers")

	sub, err := surelykafka.NewSubscriber(brokers, "g", surelykafka.WithMarshaler(wmkafka.DefaultMarshaler{}),
		surelykafka.WithSaramaConfig(func(c *sarama.Config) { c.ClientID = "billing" }),
		delivery.WithCloseTimeout(time.Second), delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err, "every option the Subscriber takes")
	require.NoError(t, sub.Close())
	require.NoError(t, sub.Close(), "twice")
}

func TestPublisherOptions(t *testing.T) {
	brokers := []string{"127.0.0.1:1"}
	leaderOnly := func(c *sarama.Config) {
		c.Producer.Idempotent = false
		c.Producer.RequiredAcks = sarama.WaitForLocal
	}
	noSuccesses := func(c *sarama.Config) { c.Producer.Return.Successes = false }
	for name, opts := range map[string][]delivery.Option{
		"acks from the leader only": {surelykafka.WithSaramaConfig(leaderOnly)},
		"no Return.Successes":       {surelykafka.WithSaramaConfig(noSuccesses)},
		"nil marshaler":             {surelykafka.WithMarshaler(nil)},
		"another marshaler":         {options.Func[options.Delivery](func(s *options.Set) error { s.Put("WithMarshaler", "x"); return nil })},
	} {
		_, err := surelykafka.NewPublisher(brokers, opts...)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := surelykafka.NewPublisher(nil)
	require.ErrorIs(t, err, delivery.ErrInvalidOption, "no brokers")
	// An option of the Subscriber only: refused, not ignored.
	_, err = surelykafka.NewPublisher(brokers, delivery.WithCloseTimeout(time.Second))
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	require.ErrorContains(t, err, "kafka.NewPublisher does not take option WithCloseTimeout")
}

func TestDefaults(t *testing.T) {
	s, err := surelykafka.SubscriberSaramaConfig()
	require.NoError(t, err)
	require.Equal(t, sarama.OffsetOldest, s.Consumer.Offsets.Initial)
	require.True(t, s.Consumer.Offsets.AutoCommit.Enable)
	require.False(t, s.Metadata.AllowAutoTopicCreation)
	require.NoError(t, s.Validate())
	p, err := surelykafka.PublisherSaramaConfig()
	require.NoError(t, err)
	require.Equal(t, sarama.WaitForAll, p.Producer.RequiredAcks)
	require.True(t, p.Producer.Idempotent)
	require.False(t, p.Metadata.AllowAutoTopicCreation)
	require.NoError(t, p.Validate())
}

// WithSaramaConfig adjusts the safe defaults, in order, and keeps what it
// does not touch.
func TestWithSaramaConfigAdjustsTheDefaults(t *testing.T) {
	p, err := surelykafka.PublisherSaramaConfig(
		surelykafka.WithSaramaConfig(func(c *sarama.Config) { c.ClientID = "first" }),
		surelykafka.WithSaramaConfig(func(c *sarama.Config) { c.ClientID += "-then-second" }))
	require.NoError(t, err)
	require.Equal(t, "first-then-second", p.ClientID)
	require.Equal(t, sarama.WaitForAll, p.Producer.RequiredAcks, "a safe default it did not touch stays")
	_, err = surelykafka.PublisherSaramaConfig(surelykafka.WithSaramaConfig(nil))
	require.ErrorContains(t, err, "kafka.WithSaramaConfig: nil function")
}
