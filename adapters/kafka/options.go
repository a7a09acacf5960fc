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

// Names of this package's options (see internal/options.Load): qualified
// with the package, so that another adapter's option of the same name is
// refused by name.
const (
	optMarshaler = "kafka.WithMarshaler"
	optSarama    = "kafka.WithSaramaConfig"
)

// WithMarshaler sets how Watermill messages and Kafka records convert, for
// the Publisher (Marshal) and the Subscriber (Unmarshal); give both sides
// the same one. The default is watermill-kafka's DefaultMarshaler wire
// format (the message UUID in the _watermill_message_uuid header, every
// metadata entry a header, the payload as the record value), read
// strictly: a record with a header key that occurs more than once is
// undecodable, where watermill-kafka's DefaultMarshaler would keep the
// last value and lose the others without a word. watermill-kafka's NewWithPartitioningMarshaler sets a
// record key (and so the partition, and the order) per message. Whatever
// Unmarshal does (an error, a panic, no message) never stops the
// subscription: the record is handed out marked undecodable (see the
// package doc).
func WithMarshaler(m wmkafka.MarshalerUnmarshaler) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return options.PutNotNil(s, delivery.ErrInvalidOption, optMarshaler, m) })
}

// WithSaramaConfig changes the Sarama client configuration the constructor
// starts from, its safe defaults (see the package doc), with adjust: add
// TLS, SASL, a client ID or a Kafka version there, so that the safe
// settings stay. Several are applied in order. The result is used as
// given, never repaired: the constructor refuses one that fails Sarama's
// Validate, and NewPublisher one whose Producer.RequiredAcks is not
// WaitForAll or whose Producer.Return.Successes is false.
//
// The Subscriber's defaults: ClientID "surely", offsets of a new group
// from the oldest message, offsets committed (only those of acked
// messages) every second and when the group's session ends, consumer
// errors returned, no topic created by reading metadata. The Publisher's:
// ClientID "surely", a synchronous, idempotent producer whose every
// message is acknowledged by all in-sync replicas (RequiredAcks
// WaitForAll), retried up to 10 times without duplicates or reordering
// (Idempotent, one request in flight per broker: Net.MaxOpenRequests 1),
// successes and errors returned, no topic created by publishing to it.
func WithSaramaConfig(adjust func(*sarama.Config)) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		if adjust == nil {
			return fmt.Errorf("%w: %s: nil function", delivery.ErrInvalidOption, optSarama)
		}
		prev := options.Get[[]func(*sarama.Config)](s, optSarama, nil)
		s.Put(optSarama, append(prev[:len(prev):len(prev)], adjust))
		return nil
	})
}

// saramaConfig returns base with the adjustments of s's WithSaramaConfig.
func saramaConfig(s *options.Set, base *sarama.Config) *sarama.Config {
	for _, adjust := range options.Get[[]func(*sarama.Config)](s, optSarama, nil) {
		adjust(base)
	}
	return base
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
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, optMarshaler, optSarama, options.CloseTimeout, options.Logger)
	if err != nil {
		return c, err
	}
	c.unmarshaler = options.Get[wmkafka.MarshalerUnmarshaler](s, optMarshaler, strictMarshaler{})
	c.sarama = saramaConfig(s, defaultSubscriberSaramaConfig())
	if err := c.sarama.Validate(); err != nil {
		return c, fmt.Errorf("%w: %s: Sarama config: %w", delivery.ErrInvalidOption, who, err)
	}
	c.closeTimeout = options.Get(s, options.CloseTimeout, options.DefaultCloseTimeout)
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
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, optMarshaler, optSarama, options.Logger)
	if err != nil {
		return c, err
	}
	c.marshaler = options.Get[wmkafka.MarshalerUnmarshaler](s, optMarshaler, strictMarshaler{})
	c.sarama = saramaConfig(s, defaultPublisherSaramaConfig())
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

// defaultSubscriberSaramaConfig returns the Sarama configuration of a
// Subscriber before WithSaramaConfig (see the package doc for why):
// offsets of a new group start at the oldest message, offsets are
// committed (only those of acked messages) every second and when the
// group's session ends, consumer errors are reported, and reading
// metadata never creates a topic.
func defaultSubscriberSaramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = "surely"
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = true
	c.Consumer.Offsets.AutoCommit.Interval = time.Second
	c.Metadata.AllowAutoTopicCreation = false
	return c
}

// defaultPublisherSaramaConfig returns the Sarama configuration of a
// Publisher before WithSaramaConfig: a synchronous, idempotent producer
// whose every message is acknowledged by all in-sync replicas
// (RequiredAcks WaitForAll), retried up to 10 times without duplicates or
// reordering (Idempotent, one request in flight per broker), and that never
// creates a topic by publishing to it.
func defaultPublisherSaramaConfig() *sarama.Config {
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
