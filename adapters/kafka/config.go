package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
)

// ErrInvalidOption wraps every configuration error of the constructors.
var ErrInvalidOption = errors.New("kafka: invalid option")

// ErrClosed is returned by Subscribe after Close, and by Publish after Close.
var ErrClosed = errors.New("kafka: closed")

// ErrNoTopic is returned by Subscribe when the topic does not exist (and the
// Sarama configuration does not let the broker create it).
var ErrNoTopic = errors.New("kafka: topic does not exist")

// DefaultCloseTimeout is Config.CloseTimeout unless set.
const DefaultCloseTimeout = 30 * time.Second

// nackResendSleep is how long watermill-kafka waits before it hands a
// nacked message out again (its default). surely's chain has already waited
// (backoff, or the delay of an operation in progress elsewhere) before it
// nacks, so this only keeps a bare handler from spinning.
const nackResendSleep = 100 * time.Millisecond

// Config configures a Subscriber.
type Config struct {
	// ConsumerGroup is the Kafka consumer group (required). Every process
	// with the same group shares the partitions of a topic; the group's
	// committed offsets are where a restarted consumer resumes.
	ConsumerGroup string
	// Unmarshaler turns Kafka records into Watermill messages (default:
	// Marshaler{}, watermill-kafka's wire format). Whatever it returns, an
	// error, a panic or no message never stops the subscription: the
	// record is handed out marked undecodable (see the package doc).
	Unmarshaler wmkafka.Unmarshaler
	// Sarama is the Sarama client configuration (default:
	// DefaultSubscriberSaramaConfig()). Start from that function to add
	// TLS, SASL, a client ID or a Kafka version, so that the safe settings
	// stay. It is used as given (after Validate), never repaired.
	Sarama *sarama.Config
	// CloseTimeout bounds how long Close (or the end of Subscribe's
	// context) waits for the messages in flight to be acked or nacked
	// before it gives them up (default 30s; see Close).
	CloseTimeout time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.ConsumerGroup == "" {
		return out, fmt.Errorf("%w: ConsumerGroup is required (without one, watermill-kafka reads every partition and commits no offsets)", ErrInvalidOption)
	}
	if out.Unmarshaler == nil {
		out.Unmarshaler = Marshaler{}
	}
	switch {
	case out.CloseTimeout == 0:
		out.CloseTimeout = DefaultCloseTimeout
	case out.CloseTimeout < 0:
		return out, fmt.Errorf("%w: CloseTimeout %v is negative", ErrInvalidOption, out.CloseTimeout)
	}
	if out.Sarama == nil {
		out.Sarama = DefaultSubscriberSaramaConfig()
	}
	if err := out.Sarama.Validate(); err != nil {
		return out, fmt.Errorf("%w: Sarama: %w", ErrInvalidOption, err)
	}
	return out, nil
}

// PublisherConfig configures a Publisher. The zero value is ready to use.
type PublisherConfig struct {
	// Marshaler turns Watermill messages into Kafka records (default:
	// Marshaler{}, watermill-kafka's wire format). Use one that the
	// subscribers' Unmarshaler reads. watermill-kafka's
	// NewWithPartitioningMarshaler sets a record key (and so the
	// partition, and the order) per message.
	Marshaler wmkafka.Marshaler
	// Sarama is the Sarama producer configuration (default:
	// DefaultPublisherSaramaConfig()). It must keep RequiredAcks
	// WaitForAll and Return.Successes: Publish returns only once every
	// in-sync replica has the message.
	Sarama *sarama.Config
}

func (c *PublisherConfig) withDefaults() (PublisherConfig, error) {
	out := *c
	if out.Marshaler == nil {
		out.Marshaler = Marshaler{}
	}
	if out.Sarama == nil {
		out.Sarama = DefaultPublisherSaramaConfig()
	}
	if out.Sarama.Producer.RequiredAcks != sarama.WaitForAll {
		return out, fmt.Errorf("%w: Sarama.Producer.RequiredAcks must be WaitForAll: with fewer, a published message can be lost with its leader", ErrInvalidOption)
	}
	if !out.Sarama.Producer.Return.Successes {
		return out, fmt.Errorf("%w: Sarama.Producer.Return.Successes must be true (a synchronous producer waits for them)", ErrInvalidOption)
	}
	if err := out.Sarama.Validate(); err != nil {
		return out, fmt.Errorf("%w: Sarama: %w", ErrInvalidOption, err)
	}
	return out, nil
}

// DefaultSubscriberSaramaConfig returns the Sarama configuration of a
// Subscriber when Config.Sarama is nil (see the package doc for why):
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
// Publisher when PublisherConfig.Sarama is nil: a synchronous, idempotent
// producer whose every message is acknowledged by all in-sync replicas
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
