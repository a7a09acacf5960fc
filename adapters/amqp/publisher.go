package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/delivery"
)

// ErrUnroutable is returned by Publish for a message that no queue took:
// the topic's queue was deleted (by an operator, or by its x-expires)
// after the publisher declared it. RabbitMQ would confirm such a message
// and drop it; the Publisher publishes with the mandatory flag, so the
// broker returns it instead, and Publish fails. The next Publish to the
// topic declares the queue again.
var ErrUnroutable = errors.New("amqp: message returned unroutable (no queue took it)")

// ErrQueueMismatch is returned by Subscribe and SubscribeInitialize for a
// queue that exists with other arguments than surely declares (durable,
// QueueArguments): a classic or transient queue, or one with x-max-length,
// x-message-ttl, x-expires or any other argument of its own. surely never
// changes an existing queue. The Publisher does not return it: it uses an
// existing queue as it is. Its absence proves nothing about loss: an
// operator policy (max-length, message-ttl, expires) can make a queue drop
// confirmed messages without any argument a client can see.
var ErrQueueMismatch = errors.New("amqp: queue exists with other arguments than surely's")

// returnBuffer is the capacity of a publishing channel's basic.return
// listener. One message at a time is in flight on a channel, so at most one
// return waits there; amqp091-go blocks its connection's reader while a
// listener is full, so the buffer has room to spare.
const returnBuffer = 4

// Publisher is a Watermill publisher on RabbitMQ, set up for at-least-once
// delivery: Publish returns only after the broker confirmed every message
// into a queue (publisher confirms, mandatory flag). It owns its
// connection. Its marshaler is watermill-amqp's Marshaler.
type Publisher struct {
	link    // its connection; link.mu also guards ready
	cfg     publisherConfig
	logger  *slog.Logger
	slots   chan *pubChannel // the channel pool: a Publish takes one and puts it back
	closing chan struct{}
	ready   map[string]bool // topics whose queue was declared

	closeOnce sync.Once
	closeErr  error

	afterSend func(*amqp.Channel) // tests: runs after each send, before the confirmation
}

var _ message.Publisher = (*Publisher)(nil)

// pubChannel is one channel of the pool, in confirm mode, opened on first
// use and again after it was lost or discarded.
type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// errPublisherClosed is returned by Publish after Close.
var errPublisherClosed = fmt.Errorf("amqp: publisher: %w", delivery.ErrClosed)

// NewPublisher connects to the RabbitMQ server at url and returns a
// publisher that owns the connection: it connects again when the
// connection is lost (on the next Publish), and Close closes it. It takes
// WithChannels, WithMarshaler, WithAMQPConfig and delivery.WithLogger; any
// other option is an error wrapping delivery.ErrInvalidOption.
//
// Messages go to the default exchange with the topic as routing key, so a
// topic is a queue. Before its first message to a topic, the publisher
// checks that the queue exists (a passive declaration) and declares a
// missing one as the Subscriber does (durable, QueueArguments). An
// existing queue is used as it is, whatever its arguments and policies:
// AMQP 0-9-1 shows a client neither, so they are the operator's
// responsibility (see the package doc). Every message is published
// mandatory on a channel in confirm mode, and persistent (delivery mode
// 2), so a queue deleted later fails Publish with ErrUnroutable.
func NewPublisher(url string, opts ...delivery.Option) (*Publisher, error) {
	cfg, err := newPublisherConfig(opts)
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		cfg: cfg, logger: cfg.logger,
		slots:   make(chan *pubChannel, cfg.channels),
		closing: make(chan struct{}),
		ready:   map[string]bool{},
	}
	for range cfg.channels {
		p.slots <- &pubChannel{}
	}
	if err := p.dial(url, cfg.amqpConfig, "surely publisher", errPublisherClosed); err != nil {
		return nil, err
	}
	return p, nil
}

// Publish publishes msgs to the queue named topic, one after the other on
// one channel, each waiting for the broker's confirmation (for a quorum
// queue: written to a majority of its replicas). It stops at the first
// failure: the messages before it are stored, that one and the rest may or
// may not be (a connection lost while waiting); publishing all of them
// again is safe when the consumer deduplicates, as surely's chain does.
//
// A message that no queue takes (the queue was deleted since it was
// declared) is an error wrapping ErrUnroutable. A broker's nack (a full
// queue that rejects publishes, for instance) and a channel or connection
// lost before the confirmation are errors too, not ErrUnroutable; the next
// Publish opens a new channel. A broker that blocks
// publishers (memory or disk alarm) makes Publish wait until the alarm
// clears; cancel msg.Context() to stop waiting (for a free channel of the
// pool, or for the confirmation).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if err := validQueueName(topic); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	select {
	case <-p.closing:
		return errPublisherClosed
	default:
	}
	var pc *pubChannel
	select {
	case pc = <-p.slots:
	case <-p.closing:
		return errPublisherClosed
	case <-msgs[0].Context().Done():
		return fmt.Errorf("amqp: publish to %q: waiting for a channel: %w", topic, msgs[0].Context().Err())
	}
	defer func() { p.slots <- pc }()
	if err := p.ensureQueue(topic); err != nil {
		return err
	}
	for _, msg := range msgs {
		if err := p.publish(pc, topic, msg); err != nil {
			return fmt.Errorf("amqp: publish to %q: %w", topic, err)
		}
	}
	return nil
}

// publish publishes msg mandatory on pc and waits for its confirmation.
func (p *Publisher) publish(pc *pubChannel, topic string, msg *message.Message) error {
	out, err := p.cfg.marshaler.Marshal(msg)
	if err != nil {
		return fmt.Errorf("marshal message %s: %w", msg.UUID, err)
	}
	if err := p.open(pc); err != nil {
		return err
	}
	ctx := msg.Context()
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, "", topic, true, false, out)
	if err != nil {
		pc.discard()
		return fmt.Errorf("send message %s: %w", msg.UUID, err)
	}
	if p.afterSend != nil {
		p.afterSend(pc.ch)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		// Its confirmation (or return) would come later on this channel,
		// where it could pass for the next message's: drop the channel.
		pc.discard()
		return fmt.Errorf("message %s: waiting for the broker's confirmation: %w", msg.UUID, ctx.Err())
	}
	// RabbitMQ sends a mandatory message's basic.return before its
	// basic.ack on the same channel, and amqp091-go hands the return to
	// the listener before it marks the confirmation done: with one message
	// in flight on the channel, a return waiting now is this message's.
	// amqp091-go closes the listener when the channel shuts down: a
	// closed, empty listener is a lost channel, not a returned message.
	select {
	case r, ok := <-pc.returns:
		if ok {
			p.forget(topic)
			p.logger.Warn("amqp: message returned unroutable; the queue is declared again on the next publish",
				"topic", topic, "message_uuid", msg.UUID, "reply_code", r.ReplyCode, "reply_text", r.ReplyText)
			return fmt.Errorf("%w: message %s to queue %q: %d %s", ErrUnroutable, msg.UUID, topic, r.ReplyCode, r.ReplyText)
		}
	default:
	}
	if !dc.Acked() {
		if pc.ch.IsClosed() {
			pc.discard()
			return fmt.Errorf("message %s: the channel closed before the broker's confirmation", msg.UUID)
		}
		return fmt.Errorf("message %s not confirmed by the broker (nack)", msg.UUID)
	}
	if pc.ch.IsClosed() {
		pc.discard()
	}
	return nil
}

// open gives pc a live channel in confirm mode.
func (p *Publisher) open(pc *pubChannel) error {
	if pc.ch != nil && !pc.ch.IsClosed() {
		return nil
	}
	pc.discard()
	conn, err := p.connection()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("confirm mode: %w", err)
	}
	pc.ch, pc.returns = ch, ch.NotifyReturn(make(chan amqp.Return, returnBuffer))
	return nil
}

// discard closes pc's channel, if any; the next use opens a new one.
func (pc *pubChannel) discard() {
	if pc.ch != nil {
		_ = pc.ch.Close()
	}
	pc.ch, pc.returns = nil, nil
}

// ensureQueue makes sure the queue named topic exists (see ensureExists)
// before the first message to it, and after a message to it was returned.
func (p *Publisher) ensureQueue(topic string) error {
	p.mu.Lock()
	ok := p.ready[topic]
	p.mu.Unlock()
	if ok {
		return nil
	}
	conn, err := p.connection()
	if err != nil {
		return err
	}
	if err := ensureExists(conn, topic); err != nil {
		return err
	}
	p.mu.Lock()
	p.ready[topic] = true
	p.mu.Unlock()
	return nil
}

// ensureExists checks on conn that the queue named topic exists (a passive
// declaration) and declares it as the Subscriber does when it is missing.
// An existing queue is used as it is, whatever its arguments: AMQP 0-9-1
// tells a client neither a queue's arguments nor the policies that apply
// to it, and refusing every queue that differs from surely's would refuse
// harmless ones (a dead-letter exchange, single active consumer, a classic
// queue made before surely).
func ensureExists(conn *amqp.Connection, topic string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(topic, true, false, false, false, nil)
	_ = ch.Close() // after a failed passive declaration the broker closed it already
	var aerr *amqp.Error
	if err == nil || !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
		if err != nil {
			return fmt.Errorf("amqp: check queue %q: %w", topic, err)
		}
		return nil
	}
	if ch, err = conn.Channel(); err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	err = declare(ch, topic)
	if errors.Is(err, ErrQueueMismatch) {
		// Declared meanwhile, with other arguments: it exists now.
		return nil
	}
	return err
}

// forget makes the next Publish to topic declare its queue again.
func (p *Publisher) forget(topic string) {
	p.mu.Lock()
	delete(p.ready, topic)
	p.mu.Unlock()
}

// Close closes the connection (and with it every channel). A Publish still
// waiting for a confirmation then fails; later ones return an error wrapping
// delivery.ErrClosed.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		c := p.conn
		p.mu.Unlock()
		close(p.closing)
		if c != nil {
			if err := c.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
				p.closeErr = fmt.Errorf("amqp: close: %w", err)
			}
		}
	})
	return p.closeErr
}
