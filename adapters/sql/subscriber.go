package sql

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/drain"
)

// Subscriber is a Watermill subscriber on PostgreSQL tables written by
// Publisher (or watermill-sql), with safe defaults for at-least-once
// delivery (see the package doc). It wraps watermill-sql's subscriber. It
// never closes the *sql.DB it was given.
type Subscriber struct {
	cfg   subscriberConfig
	inner *wmsql.Subscriber

	closing   chan struct{} // stop handing out messages
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex // orders the Adds in Subscribe before the Waits in Close
	closed   bool
	active   sync.WaitGroup // subscriptions until their message in flight is settled
	runs     sync.WaitGroup // subscriptions until their goroutine ends
	innerEnd chan struct{}  // closed after the inner subscriber was closed
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber in consumer group group (1 to 255
// bytes) on the PostgreSQL database of db. The group's row in a topic's
// offsets table holds how far the group got; every subscriber with the
// same group shares the topic's messages, one at a time (see the package
// doc). It creates no table (see InitializeSchema). It takes
// delivery.WithAckWait (at least 100ms), WithPollInterval,
// delivery.WithResendInterval (at least 1ms), WithBatchSize,
// delivery.WithCloseTimeout and delivery.WithLogger; any other option is
// refused with an error wrapping delivery.ErrInvalidOption.
func NewSubscriber(db *stdsql.DB, group string, opts ...delivery.Option) (*Subscriber, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sql.NewSubscriber: nil db", delivery.ErrInvalidOption)
	}
	cfg, err := newSubscriberConfig(group, opts)
	if err != nil {
		return nil, err
	}
	noDeadline := time.Duration(0) // the Subscriber keeps the deadline itself, extendable
	inner, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
		ConsumerGroup:  cfg.group,
		AckDeadline:    &noDeadline,
		PollInterval:   cfg.pollInterval,
		ResendInterval: cfg.resendInterval,
		RetryInterval:  retryInterval,
		SchemaAdapter:  newSchema(cfg.batchSize),
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermill.NewSlogLogger(cfg.logger))
	if err != nil {
		return nil, fmt.Errorf("%w: sql.NewSubscriber: %w", delivery.ErrInvalidOption, err)
	}
	return &Subscriber{
		cfg: cfg, inner: inner,
		closing: make(chan struct{}), innerEnd: make(chan struct{}),
	}, nil
}

// Subscribe starts consuming topic in the consumer group and hands out its
// messages one at a time, in the order of the transactions that published
// them (the next one after the previous was acked). It fails when the
// topic's tables do not exist. The channel is closed when ctx is done or
// on Close, after the message in flight was settled.
//
// Each message's context carries a delivery.Control (see the package doc)
// and watermill-sql's consuming transaction (wmsql.TxFromContext). It
// derives from ctx's values but is not cancelled with it: it is cancelled
// when the delivery is given up (its ack wait passed, or Close gave up
// waiting).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, delivery.ErrClosed
	}
	s.active.Add(1)
	s.runs.Add(1)
	s.mu.Unlock()
	in, stop, err := s.subscribe(ctx, topic)
	if err != nil {
		s.active.Done()
		s.runs.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.run(ctx, topic, in, stop, out)
	return out, nil
}

// subscribe starts one watermill-sql subscription of topic, stopped by the
// returned function (which rolls back its transaction). A concurrent
// Close interrupts it (a pool with no free connection would hold it up).
func (s *Subscriber) subscribe(ctx context.Context, topic string) (<-chan *message.Message, context.CancelFunc, error) {
	ictx, stop := context.WithCancel(context.WithoutCancel(ctx))
	started := make(chan struct{})
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-s.closing:
			stop()
			close(interrupted)
		case <-started:
		}
	}()
	in, err := s.inner.Subscribe(ictx, topic)
	close(started)
	select {
	case <-interrupted:
		if err == nil {
			drain.Chan(in)
		}
		return nil, nil, delivery.ErrClosed
	default:
	}
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("sql: subscribe %q (do its tables exist? InitializeSchema creates them): %w", topic, err)
	}
	return in, stop, nil
}

// outcome is why forward returned.
type outcome int

const (
	innerEnded outcome = iota // watermill-sql closed the channel
	expired                   // a delivery's ack wait passed
	ctxDone                   // Subscribe's context is done
	closing                   // Close was called
)

// run hands out the messages of one subscription, starting a new
// watermill-sql subscription after a deadline passed. Only run sends on
// out and closes it.
func (s *Subscriber) run(ctx context.Context, topic string, in <-chan *message.Message, stop context.CancelFunc, out chan<- *message.Message) {
	defer s.runs.Done()
	defer close(out)
	activeDone := sync.OnceFunc(s.active.Done)
	defer activeDone()
	for {
		switch s.forward(ctx, topic, in, out) {
		case expired:
			// Roll back the consuming transaction: the message goes back to
			// the group, and this subscription reads again.
			stop()
			drain.Chan(in)
			var err error
			for in, stop, err = s.subscribe(ctx, topic); err != nil; in, stop, err = s.subscribe(ctx, topic) {
				if errors.Is(err, delivery.ErrClosed) {
					return
				}
				s.cfg.logger.WarnContext(ctx, "surely/sql: resubscribing failed", "topic", topic, "error", err)
				select {
				case <-time.After(retryInterval):
				case <-ctx.Done():
					return
				case <-s.closing:
					return
				}
			}
		case closing:
			// Close closes watermill-sql's subscriber once every
			// subscription settled: the last ack commits before the
			// transaction ends.
			activeDone()
			<-s.innerEnd
			stop()
			drain.Chan(in)
			return
		default: // ctxDone, innerEnded
			stop()
			drain.Chan(in)
			return
		}
	}
}

// forward hands out messages until a delivery expires or the subscription
// ends; in the latter case it first waits for the message in flight to be
// settled.
func (s *Subscriber) forward(ctx context.Context, topic string, in <-chan *message.Message, out chan<- *message.Message) outcome {
	for {
		var msg *message.Message
		var ok bool
		select {
		case msg, ok = <-in:
			if !ok {
				return innerEnded
			}
		case <-ctx.Done():
			return ctxDone
		case <-s.closing:
			return closing
		}
		l := newLease(s.cfg.ackWait)
		msg.SetContext(delivery.WithControl(msg.Context(), l))
		select {
		case out <- msg:
		case <-ctx.Done():
			l.settle()
			return ctxDone // not handed out: its transaction is rolled back
		case <-s.closing:
			l.settle()
			return closing
		}
		select {
		case <-msg.Acked():
			l.settle()
		case <-msg.Nacked():
			l.settle()
		case <-l.expired:
			s.cfg.logger.WarnContext(ctx, "surely/sql: ack wait passed; the message goes back to the group",
				"topic", topic, "message_uuid", msg.UUID, "ack_wait", s.cfg.ackWait)
			return expired
		case <-ctx.Done():
			s.settle(ctx, topic, msg, l)
			return ctxDone
		case <-s.closing:
			s.settle(ctx, topic, msg, l)
			return closing
		}
	}
}

// settle waits up to the close timeout (or the delivery's deadline) for
// msg to be acked or nacked.
func (s *Subscriber) settle(ctx context.Context, topic string, msg *message.Message, l *lease) {
	t := time.NewTimer(s.cfg.closeTimeout)
	defer t.Stop()
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-l.expired:
	case <-t.C:
		s.cfg.logger.WarnContext(ctx, "surely/sql: message still in flight at close; it goes back to the group",
			"topic", topic, "message_uuid", msg.UUID)
	}
	l.settle()
}

// Close stops handing out messages, waits (up to the close timeout,
// delivery.WithCloseTimeout, default 30s) for those in flight to be acked
// or nacked, lets their acks commit, then ends every subscription; a
// message not acked by then goes back to the group (its transaction is
// rolled back). Close is safe to call more than once (the router calls it
// too). It does not close the *sql.DB.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.active.Wait()
		s.closeErr = s.inner.Close()
		close(s.innerEnd)
		s.runs.Wait()
	})
	return s.closeErr
}
