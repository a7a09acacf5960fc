package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// ErrNoTopic is returned by Subscribe when the topic does not exist (and the
// Sarama configuration does not let the broker create it).
var ErrNoTopic = errors.New("kafka: topic does not exist")

// nackResendSleep is how long watermill-kafka waits before it hands a
// nacked message out again (its default). surely's chain has already waited
// (backoff, or the delay of an operation in progress elsewhere) before it
// nacks, so this only keeps a bare handler from spinning.
const nackResendSleep = 100 * time.Millisecond

// Names under which this package's options record their values.
const (
	optMarshaler = "WithMarshaler"
	optSarama    = "WithSaramaConfig"
)

// WithMarshaler sets how Watermill messages and Kafka records convert, for
// the Publisher (Marshal) and the Subscriber (Unmarshal); give both sides
// the same one. The default is Marshaler{}, watermill-kafka's wire format
// read strictly. watermill-kafka's NewWithPartitioningMarshaler sets a
// record key (and so the partition, and the order) per message. Whatever
// Unmarshal does (an error, a panic, no message) never stops the
// subscription: the record is handed out marked undecodable (see the
// package doc).
func WithMarshaler(m wmkafka.MarshalerUnmarshaler) delivery.Option {
	return func(s *options.Set) error {
		if m == nil {
			return fmt.Errorf("%w: kafka.WithMarshaler: nil", delivery.ErrInvalidOption)
		}
		s.Put(optMarshaler, m)
		return nil
	}
}

// WithSaramaConfig sets the Sarama client configuration. The default is
// DefaultSubscriberSaramaConfig() for a Subscriber and
// DefaultPublisherSaramaConfig() for a Publisher: start from the matching
// one to add TLS, SASL, a client ID or a Kafka version, so that the safe
// settings stay. It is used as given, never repaired: the constructor
// refuses one that fails Sarama's Validate, and NewPublisher one whose
// Producer.RequiredAcks is not WaitForAll or whose
// Producer.Return.Successes is false.
func WithSaramaConfig(c *sarama.Config) delivery.Option {
	return func(s *options.Set) error {
		if c == nil {
			return fmt.Errorf("%w: kafka.WithSaramaConfig: nil", delivery.ErrInvalidOption)
		}
		s.Put(optSarama, c)
		return nil
	}
}

// subscriberConfig is what NewSubscriber's options set.
type subscriberConfig struct {
	group        string
	unmarshaler  wmkafka.Unmarshaler
	sarama       *sarama.Config
	closeTimeout time.Duration
	logger       *slog.Logger
}

func newSubscriberConfig(group string, opts []delivery.Option) (subscriberConfig, error) {
	const who = "kafka.NewSubscriber"
	c := subscriberConfig{group: group}
	if group == "" {
		return c, fmt.Errorf("%w: %s: a consumer group is required (without one, watermill-kafka reads every partition and commits no offsets)",
			delivery.ErrInvalidOption, who)
	}
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return c, err
	}
	if err := s.Check(delivery.ErrInvalidOption, who,
		optMarshaler, optSarama, options.CloseTimeout, options.Logger); err != nil {
		return c, err
	}
	m, err := options.GetAs[wmkafka.MarshalerUnmarshaler](s, delivery.ErrInvalidOption, who, optMarshaler, Marshaler{})
	if err != nil {
		return c, err
	}
	c.unmarshaler = m
	if c.sarama, err = options.GetAs(s, delivery.ErrInvalidOption, who, optSarama, (*sarama.Config)(nil)); err != nil {
		return c, err
	}
	if c.sarama == nil {
		c.sarama = DefaultSubscriberSaramaConfig()
	}
	if err := c.sarama.Validate(); err != nil {
		return c, fmt.Errorf("%w: %s: Sarama config: %w", delivery.ErrInvalidOption, who, err)
	}
	c.closeTimeout = options.Get(s, options.CloseTimeout, delivery.DefaultCloseTimeout)
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}

// publisherConfig is what NewPublisher's options set.
type publisherConfig struct {
	marshaler wmkafka.Marshaler
	sarama    *sarama.Config
	logger    *slog.Logger
}

func newPublisherConfig(opts []delivery.Option) (publisherConfig, error) {
	const who = "kafka.NewPublisher"
	var c publisherConfig
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return c, err
	}
	if err := s.Check(delivery.ErrInvalidOption, who, optMarshaler, optSarama, options.Logger); err != nil {
		return c, err
	}
	m, err := options.GetAs[wmkafka.MarshalerUnmarshaler](s, delivery.ErrInvalidOption, who, optMarshaler, Marshaler{})
	if err != nil {
		return c, err
	}
	c.marshaler = m
	if c.sarama, err = options.GetAs(s, delivery.ErrInvalidOption, who, optSarama, (*sarama.Config)(nil)); err != nil {
		return c, err
	}
	if c.sarama == nil {
		c.sarama = DefaultPublisherSaramaConfig()
	}
	if c.sarama.Producer.RequiredAcks != sarama.WaitForAll {
		return c, fmt.Errorf("%w: %s: Sarama config: Producer.RequiredAcks must be WaitForAll: with fewer, a published message can be lost with its leader",
			delivery.ErrInvalidOption, who)
	}
	if !c.sarama.Producer.Return.Successes {
		return c, fmt.Errorf("%w: %s: Sarama config: Producer.Return.Successes must be true (a synchronous producer waits for them)",
			delivery.ErrInvalidOption, who)
	}
	if err := c.sarama.Validate(); err != nil {
		return c, fmt.Errorf("%w: %s: Sarama config: %w", delivery.ErrInvalidOption, who, err)
	}
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}

// DefaultSubscriberSaramaConfig returns the Sarama configuration of a
// Subscriber given no WithSaramaConfig (see the package doc for why):
// offsets of a new group start at the oldest message, offsets are
// committed (only those of acked messages) every second and when the
// group's session ends, consumer errors are reported, and reading
// metadata never creates a topic.
func DefaultSubscriberSaramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = "surely"
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = true
	c.Consumer.Offsets.AutoCommit.Interval = time.Second
	c.Metadata.AllowAutoTopicCreation = false
	return c
}

// DefaultPublisherSaramaConfig returns the Sarama configuration of a
// Publisher given no WithSaramaConfig: a synchronous, idempotent producer
// whose every message is acknowledged by all in-sync replicas
// (RequiredAcks WaitForAll), retried up to 10 times without duplicates or
// reordering (Idempotent, one request in flight per broker), and that never
// creates a topic by publishing to it.
func DefaultPublisherSaramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = "surely"
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	c.Producer.Retry.Max = 10
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Metadata.AllowAutoTopicCreation = false
	return c
}
