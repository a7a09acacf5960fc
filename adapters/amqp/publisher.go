package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Publisher is a Watermill publisher on RabbitMQ: watermill-amqp's, set up
// for at-least-once delivery. Publish returns only after the broker
// confirmed every message (publisher confirms). It owns its connection.
type Publisher struct {
	inner *wmamqp.Publisher

	mu    sync.Mutex // serializes queue declarations
	ready map[string]bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to the RabbitMQ server at url and returns a
// publisher that owns the connection: it reconnects when the connection is
// lost, and Close closes it. logger may be nil (discard).
//
// Messages go to the default exchange with the topic as routing key, so a
// topic is a queue. Before the first message to a topic, the publisher makes
// sure the queue exists: it keeps an existing queue as it is (whatever its
// arguments) and declares a missing one as the Subscriber does (durable,
// QueueArguments), because RabbitMQ confirms and drops a message that no
// queue takes. Every channel of the pool is in confirm mode, and messages
// are persistent (delivery mode 2).
func NewPublisher(url string, cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if url == "" {
		return nil, fmt.Errorf("%w: empty url", ErrInvalidOption)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dial := dialConfig(cfg.AMQPConfig, "surely publisher")
	topicKey := func(topic string) string { return topic }
	inner, err := wmamqp.NewPublisher(wmamqp.Config{
		Connection: wmamqp.ConnectionConfig{AmqpURI: url, AmqpConfig: &dial},
		Marshaler:  cfg.Marshaler,
		Exchange:   wmamqp.ExchangeConfig{GenerateName: wmamqp.GenerateExchangeNameConstant("")},
		Queue:      wmamqp.QueueConfig{GenerateName: wmamqp.GenerateQueueNameTopicName, Durable: true, Arguments: QueueArguments()},
		Publish: wmamqp.PublishConfig{
			GenerateRoutingKey: topicKey,
			ChannelPoolSize:    cfg.Channels,
			ConfirmDelivery:    true,
		},
		TopologyBuilder: &wmamqp.DefaultTopologyBuilder{},
	}, watermill.NewSlogLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("amqp: publisher: %w", err)
	}
	return &Publisher{inner: inner, ready: map[string]bool{}}, nil
}

// Publish publishes msgs to the queue named topic, one after the other,
// each waiting for the broker's confirmation (for a quorum queue: written
// to a majority of its replicas). It stops at the first failure: the
// messages before it are stored, that one and the rest may or may not be
// (a connection lost while waiting); publishing all of them again is safe
// when the consumer deduplicates, as surely's chain does.
//
// A broker that blocks publishers (memory or disk alarm) makes Publish wait
// until the alarm clears; cancel msg.Context() to stop waiting for the send.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if err := validQueueName(topic); err != nil {
		return err
	}
	if err := p.ensureQueue(topic); err != nil {
		return err
	}
	if err := p.inner.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("amqp: publish to %q: %w", topic, err)
	}
	return nil
}

// ensureQueue makes sure the queue named topic exists, once per topic.
func (p *Publisher) ensureQueue(topic string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready[topic] {
		return nil
	}
	if p.inner.Closed() {
		return errors.New("amqp: publisher closed")
	}
	if !p.inner.IsConnected() {
		return errors.New("amqp: not connected")
	}
	conn := p.inner.Connection()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(topic, true, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		// The failed passive declaration closed the channel.
		if ch, err = conn.Channel(); err != nil {
			return fmt.Errorf("amqp: open channel: %w", err)
		}
		err = declare(ch, topic)
	} else if err != nil {
		err = fmt.Errorf("amqp: check queue %q: %w", topic, err)
	}
	_ = ch.Close()
	if err != nil {
		return err
	}
	p.ready[topic] = true
	return nil
}

// Close closes the channel pool and the connection.
func (p *Publisher) Close() error { return p.inner.Close() }
