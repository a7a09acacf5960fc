package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/drain"
)

// Reconnection backoff of a subscription whose channel or connection died.
const (
	minReconnectWait = 100 * time.Millisecond
	maxReconnectWait = 5 * time.Second
)

// Subscriber is a Watermill subscriber on RabbitMQ with safe defaults for
// at-least-once delivery (see the package doc). It owns its connection.
type Subscriber struct {
	link   // its connection; link.mu also orders wg.Add in Subscribe before wg.Wait in Close
	cfg    subscriberConfig
	logger *slog.Logger

	closing   chan struct{} // stop handing out messages
	abandon   chan struct{} // stop waiting for acks
	closeOnce sync.Once
	closeErr  error

	wg sync.WaitGroup // subscriptions and their channels
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// errSubscriberClosed is returned by Subscribe and SubscribeInitialize
// after Close.
var errSubscriberClosed = fmt.Errorf("amqp: subscriber: %w", delivery.ErrClosed)

// NewSubscriber connects to the RabbitMQ server at url (amqp.DialConfig,
// with WithAMQPConfig's configuration) and returns a subscriber that owns
// the connection: it reconnects when the connection is lost, and Close
// closes it. It takes delivery.WithConcurrency (at most 65535, the
// prefetch), WithMarshaler, WithAMQPConfig, delivery.WithLogger and
// delivery.WithCloseTimeout; any other option is an error wrapping
// delivery.ErrInvalidOption.
func NewSubscriber(url string, opts ...delivery.Option) (*Subscriber, error) {
	cfg, err := newSubscriberConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, logger: cfg.logger, closing: make(chan struct{}), abandon: make(chan struct{})}
	if err := s.dial(url, cfg.amqpConfig, "surely subscriber", errSubscriberClosed); err != nil {
		return nil, err
	}
	return s, nil
}

// declare declares the queue of topic on ch (see QueueArguments).
func declare(ch *amqp.Channel, topic string) error {
	_, err := ch.QueueDeclare(topic, true, false, false, false, QueueArguments())
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed {
		return fmt.Errorf("%w: queue %q (a classic or transient queue, one with a length limit, TTL or expiry "+
			"of its own, or a quorum queue without x-delivery-limit?); surely never changes an existing queue: %w",
			ErrQueueMismatch, topic, err)
	}
	if err != nil {
		return fmt.Errorf("amqp: declare queue %q: %w", topic, err)
	}
	return nil
}

// SubscribeInitialize declares the queue of topic: durable, with
// QueueArguments. Subscribe does it too.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := validQueueName(topic); err != nil {
		return err
	}
	c, err := s.connection()
	if err != nil {
		return err
	}
	ch, err := c.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	return declare(ch, topic)
}

// session is one channel consuming one queue.
type session struct {
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	inflight   sync.WaitGroup // messages handed out and not settled
}

// open opens a channel, declares the queue of topic, sets the prefetch and
// starts consuming.
func (s *Subscriber) open(topic string) (*session, error) {
	c, err := s.connection()
	if err != nil {
		return nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	sess := &session{ch: ch, tag: consumerTag()}
	if err := declare(ch, topic); err != nil {
		_ = ch.Close()
		return nil, err
	}
	if err := ch.Qos(s.cfg.concurrency, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: set prefetch: %w", err)
	}
	sess.deliveries, err = ch.Consume(topic, sess.tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: consume %q: %w", topic, err)
	}
	return sess, nil
}

func consumerTag() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "surely-" + hex.EncodeToString(b)
}

// Subscribe declares the queue named topic (durable, QueueArguments) and
// starts consuming it with manual acks and a prefetch of
// delivery.WithConcurrency's n. Each message carries a delivery.Info and a
// delivery.Control in its context, which derives from ctx. When the
// channel or connection is lost the subscription opens a new one (with
// backoff); the broker requeues what was unacked. The channel is closed
// when ctx is done or on Close.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validQueueName(topic); err != nil {
		return nil, err
	}
	sess, err := s.open(topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = sess.ch.Close()
		return nil, errSubscriberClosed
	}
	s.wg.Add(1)
	go s.consume(ctx, topic, sess, out)
	return out, nil
}

// consume runs a subscription: it reads sess until it ends, and opens a new
// session when the old one died. Only consume sends on out and closes it.
func (s *Subscriber) consume(ctx context.Context, topic string, sess *session, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	for {
		if s.read(ctx, sess, out) {
			s.retire(sess)
			return
		}
		// The channel, its connection or the consumer is gone: what it
		// held unacked goes back to the queue, and the acks of messages
		// still in flight will fail. Close it once they are settled.
		s.wg.Add(1)
		go func(sess *session) {
			defer s.wg.Done()
			s.retire(sess)
		}(sess)
		s.logger.WarnContext(ctx, "surely/amqp: consuming stopped; reopening", "topic", topic)
		if sess = s.reopen(ctx, topic); sess == nil {
			return
		}
	}
}

// reopen opens a new session for topic, with backoff; nil when the
// subscriber closes or ctx is done first.
func (s *Subscriber) reopen(ctx context.Context, topic string) *session {
	wait := minReconnectWait
	for {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		sess, err := s.open(topic)
		if err == nil {
			s.logger.InfoContext(ctx, "surely/amqp: consuming again", "topic", topic)
			return sess
		}
		if errors.Is(err, delivery.ErrClosed) {
			return nil
		}
		s.logger.WarnContext(ctx, "surely/amqp: reopening failed", "topic", topic, "error", err)
		wait = min(2*wait, maxReconnectWait)
	}
}

// read hands out each delivery of sess as a Watermill message whose context
// carries the delivery facts, and starts settling it. It returns true when
// the subscription must stop (Close, or ctx done) and false when the
// deliveries ended (the channel died or the broker cancelled the consumer).
func (s *Subscriber) read(ctx context.Context, sess *session, out chan<- *message.Message) bool {
	for {
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-sess.deliveries:
			if !ok {
				return false
			}
		case <-s.closing:
			return true
		case <-ctx.Done():
			return true
		}
		msg, info := receive(s.cfg.marshaler, d)
		mctx, cancel := context.WithCancel(ctx)
		msg.SetContext(delivery.WithControl(delivery.WithInfo(mctx, info), control{}))
		select {
		case out <- msg:
		case <-s.closing:
			cancel()
			_ = d.Nack(false, true) // not handed out: let another consumer have it now
			return true
		case <-ctx.Done():
			cancel()
			_ = d.Nack(false, true)
			return true
		}
		sess.inflight.Add(1)
		go s.settle(sess, msg, d, cancel)
	}
}

// settle acks or nacks the delivery as the consumer did msg.
func (s *Subscriber) settle(sess *session, msg *message.Message, d amqp.Delivery, cancel context.CancelFunc) {
	defer sess.inflight.Done()
	defer cancel()
	select {
	case <-msg.Acked():
		if err := d.Ack(false); err != nil {
			s.logger.WarnContext(msg.Context(), "surely/amqp: ack failed; the broker will redeliver the message",
				"message_uuid", msg.UUID, "error", err)
		}
	case <-msg.Nacked():
		if err := d.Nack(false, true); err != nil {
			s.logger.WarnContext(msg.Context(), "surely/amqp: nack failed; the broker will redeliver the message when the channel closes",
				"message_uuid", msg.UUID, "error", err)
		}
	case <-s.abandon:
		// Left unacked: the broker requeues it when the channel closes.
	}
}

// retire stops the consumer of sess, requeues what the broker prefetched
// but was not handed out, waits until the messages in flight are settled
// (or Close gives up on them), and closes the channel.
func (s *Subscriber) retire(sess *session) {
	if err := sess.ch.Cancel(sess.tag, false); err == nil {
		// After basic.cancel-ok the client hands over what it buffered,
		// then closes deliveries.
		for d := range sess.deliveries {
			_ = d.Nack(false, true)
		}
	}
	done := make(chan struct{})
	go func() { sess.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-s.abandon:
		<-done // settle returns on abandon too
	}
	_ = sess.ch.Close()
}

// Close stops handing out messages, waits (up to the close timeout,
// delivery.WithCloseTimeout) for those in flight to be acked or nacked,
// then closes the channels and the connection. The broker requeues whatever is still unacked then; the
// contexts of those messages' handlers are cancelled. Close is safe to call
// more than once (the router calls it too).
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		if drain.Wait(&s.wg, s.cfg.closeTimeout, s.abandon) {
			s.logger.Warn("surely/amqp: messages still in flight at close; the broker will redeliver them")
		}
		s.dialMu.Lock() // a dial in progress finishes, sees closed and closes its connection
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		s.dialMu.Unlock()
		if c != nil {
			if err := c.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
				s.closeErr = fmt.Errorf("amqp: close connection: %w", err)
			}
		}
	})
	return s.closeErr
}
