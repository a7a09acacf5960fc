package kafka

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
)

// Publisher is a Watermill publisher on Kafka: watermill-kafka's, with a
// synchronous, idempotent Sarama producer whose messages are acknowledged
// by every in-sync replica before Publish returns. It owns its producer.
type Publisher struct {
	inner *wmkafka.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to the Kafka cluster of brokers and returns a
// publisher that owns its Sarama producer: Close closes it. It takes
// WithMarshaler, WithSaramaConfig and delivery.WithLogger; any other option
// is refused with an error wrapping delivery.ErrInvalidOption.
func NewPublisher(brokers []string, opts ...delivery.Option) (*Publisher, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: kafka.NewPublisher: no brokers", delivery.ErrInvalidOption)
	}
	cfg, err := newPublisherConfig(opts)
	if err != nil {
		return nil, err
	}
	inner, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
		Brokers:               brokers,
		Marshaler:             cfg.marshaler,
		OverwriteSaramaConfig: cfg.sarama,
	}, watermill.NewSlogLogger(cfg.logger))
	if err != nil {
		return nil, fmt.Errorf("kafka: publisher: %w", err)
	}
	return &Publisher{inner: inner}, nil
}

// Publish sends msgs to topic one after the other, each waiting for the
// acknowledgement of every in-sync replica. It stops at the first failure:
// the messages before it are stored, that one and the rest may or may not
// be (publishing all of them again can duplicate some; their UUIDs are
// unchanged, so surely consumers deduplicate them). A topic that does not
// exist fails the publish: it is not created.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.inner.Publish(topic, msgs...)
}

// Close closes the producer. It is safe to call more than once.
func (p *Publisher) Close() error { return p.inner.Close() }
