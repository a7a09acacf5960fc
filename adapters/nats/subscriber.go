package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/drain"
)

// Subscriber is a Watermill subscriber on NATS JetStream with safe defaults
// for at-least-once delivery (see the package doc). It owns its connection.
type Subscriber struct {
	cfg    subscriberConfig
	logger *slog.Logger
	conn   *nats.Conn
	js     jetstream.JetStream

	connClosed chan struct{}
	closing    chan struct{} // stop handing out messages
	abandon    chan struct{} // stop waiting for acks
	closeOnce  sync.Once
	closeErr   error

	mu     sync.Mutex // orders wg.Add in Subscribe before wg.Wait in Close
	closed bool
	iters  []jetstream.MessagesContext
	wg     sync.WaitGroup // readers and messages in flight
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// errSubscriberClosed is returned by Subscribe after Close.
var errSubscriberClosed = fmt.Errorf("nats: subscriber: %w", delivery.ErrClosed)

// NewSubscriber connects to the NATS server at url (nats.Connect, with
// WithNATSOptions' options) and returns a subscriber for consumer that
// owns the connection: Close drains and closes it.
//
// consumer is letters, digits, '-' and '_' (at most 64). Each topic gets
// its own durable JetStream consumer, named ConsumerName(consumer, topic);
// every process using the same consumer shares its messages (competing
// consumers).
//
// It takes delivery.WithConcurrency, delivery.WithAckWait (at least
// 100ms), WithMarshaler, WithNATSOptions, delivery.WithLogger and
// delivery.WithCloseTimeout; any other option is an error wrapping
// delivery.ErrInvalidOption.
func NewSubscriber(url, consumer string, opts ...delivery.Option) (*Subscriber, error) {
	if url == "" {
		return nil, fmt.Errorf("%w: empty url", delivery.ErrInvalidOption)
	}
	cfg, err := newSubscriberConfig(consumer, opts)
	if err != nil {
		return nil, err
	}
	logger := cfg.logger
	nc, err := nats.Connect(url, cfg.natsOptions...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	s := &Subscriber{
		cfg: cfg, logger: logger, conn: nc,
		connClosed: make(chan struct{}), closing: make(chan struct{}), abandon: make(chan struct{}),
	}
	prev := nc.ClosedHandler()
	nc.SetClosedHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		close(s.connClosed)
	})
	if s.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return s, nil
}

// SubscribeInitialize creates or updates the durable consumer of topic
// (see the package doc for its settings). Subscribe calls it too.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.ensureConsumer(ctx, topic)
	return err
}

func (s *Subscriber) ensureConsumer(ctx context.Context, topic string) (jetstream.Consumer, error) {
	stream, err := s.js.StreamNameBySubject(ctx, topic)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w %q: create the stream first (EnsureStream)", ErrNoStream, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: find the stream of %q: %w", topic, err)
	}
	name := ConsumerName(s.cfg.consumer, topic)
	c, err := s.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "surely consumer " + s.cfg.consumer + " of " + topic,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: topic,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.ackWait,
		MaxDeliver:    -1,
		MaxAckPending: s.cfg.concurrency,
	})
	if err != nil {
		return nil, fmt.Errorf("nats: create consumer %q on stream %q: %w", name, stream, err)
	}
	return c, nil
}

// pullExpiry bounds each pull request (nats.go's default is 30s). The
// iterator's missing-heartbeat check, which recovers from a pull request
// the server lost, fires after 2 heartbeats: pullExpiry with the default
// heartbeat of half the expiry.
const pullExpiry = 5 * time.Second

// Waits of nextMsg's short Next calls: the first, doubled up to the last.
const (
	recheckFirst = 25 * time.Millisecond
	recheckLast  = 800 * time.Millisecond
)

// Subscribe creates or updates the durable consumer of topic and starts
// consuming it. Each message carries a delivery.Info and a delivery.Control
// in its context, which derives from ctx. The channel is closed when ctx is
// done, on Close, or when the consumer is deleted on the server.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, errSubscriberClosed
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := s.ensureConsumer(ictx, topic)
	cancel()
	if err != nil {
		return nil, err
	}
	// Fetch no more than can be in flight: a buffered message's ack timer
	// runs while it waits.
	it, err := c.Messages(jetstream.PullMaxMessages(s.cfg.concurrency), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return nil, fmt.Errorf("nats: consume %q: %w", topic, err)
	}
	out := make(chan *message.Message)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		it.Stop()
		return nil, errSubscriberClosed
	}
	s.iters = append(s.iters, it)
	s.wg.Add(1)
	go s.read(ctx, topic, it, out)
	return out, nil
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// read hands out each delivery as a Watermill message whose context
// carries the delivery facts, and starts settling it. Only read sends on
// out and closes it.
func (s *Subscriber) read(ctx context.Context, topic string, it jetstream.MessagesContext, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		jm, err := nextMsg(it)
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return
		}
		if err != nil {
			// Next has stopped the iterator itself on a terminal error (the
			// consumer was deleted); it returns ErrMsgIteratorClosed next.
			s.logger.WarnContext(ctx, "surely/nats: consuming failed", "topic", topic, "error", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-s.closing:
			}
			continue
		}
		msg, r := receive(s.cfg.marshaler, jm)
		mctx, cancel := context.WithCancel(ctx)
		if r.hasInfo {
			mctx = delivery.WithInfo(mctx, r.info)
		}
		msg.SetContext(delivery.WithControl(mctx, r))
		select {
		case out <- msg:
		case <-s.closing:
			cancel()
			_ = jm.Nak() // not handed out: let another consumer have it now
			return
		case <-ctx.Done():
			cancel()
			_ = jm.Nak()
			return
		}
		s.wg.Add(1)
		go s.settle(msg, r, cancel)
	}
}

// nextMsg returns the iterator's next message, working around a race in
// nats.go's pull iterator (v1.55.0, jetstream/pull.go). Next sends a new
// pull request only from checkPending, at the top of its loop, and skips
// it while the goroutine that publishes the previous request has not yet
// marked it done (fetchInProgress). When the server answers that request
// at once (a message was ready: after a nak, or a backlog) and the message
// is handed out and Next called again before that mark is cleared, Next
// finds nothing requested, requests nothing, and waits with no pull
// request at the server until its missing-heartbeat timer fires
// (2 heartbeats, pullExpiry here) and it returns ErrNoHeartbeat.
//
// Every call of Next runs checkPending again, so short Next calls, the
// waits doubling from recheckFirst to recheckLast, send the skipped
// request after recheckFirst (the publishing goroutine has long finished
// by then). A short call that times out loses nothing, and requests
// nothing while a request is outstanding. Then a blocking Next, whose
// heartbeat check still covers a pull request the server lost.
func nextMsg(it jetstream.MessagesContext) (jetstream.Msg, error) {
	for wait := recheckFirst; wait <= recheckLast; wait *= 2 {
		jm, err := it.Next(jetstream.NextMaxWait(wait))
		if !errors.Is(err, nats.ErrTimeout) {
			return jm, err
		}
	}
	return it.Next()
}

// settle acks or nacks the delivery as the consumer did msg.
func (s *Subscriber) settle(msg *message.Message, r *received, cancel context.CancelFunc) {
	defer s.wg.Done()
	defer cancel()
	select {
	case <-msg.Acked():
		if err := r.ack(); err != nil {
			s.logger.WarnContext(msg.Context(), "surely/nats: ack failed; the message will be redelivered",
				"message_uuid", msg.UUID, "error", err)
		}
	case <-msg.Nacked():
		if err := r.nak(); err != nil {
			s.logger.WarnContext(msg.Context(), "surely/nats: nak failed; the message will be redelivered after AckWait",
				"message_uuid", msg.UUID, "error", err)
		}
	case <-s.abandon:
		// Left unacked: the server redelivers it after AckWait.
	}
}

// Close stops handing out messages, waits (up to the close timeout,
// delivery.WithCloseTimeout) for those in flight to be acked or nacked,
// then drains and closes the connection (waiting up to the close timeout
// again).
// Messages still unacked then are redelivered by the server after AckWait;
// the contexts of their handlers are cancelled. Close is safe to call more
// than once (the router calls it too).
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		iters := s.iters
		s.mu.Unlock()
		close(s.closing)
		for _, it := range iters {
			it.Stop()
		}
		if drain.Wait(&s.wg, s.cfg.closeTimeout, s.abandon) {
			s.logger.Warn("surely/nats: messages still in flight at close; they will be redelivered")
		}
		if err := s.conn.Drain(); err != nil {
			s.conn.Close()
		}
		select {
		case <-s.connClosed:
		case <-time.After(s.cfg.closeTimeout):
			s.conn.Close()
			s.closeErr = errors.New("nats: connection did not drain in time")
		}
	})
	return s.closeErr
}
