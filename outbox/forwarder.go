package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/internal/options"
)

// Defaults of the forwarder options (watermill-sql's), stated in their docs.
const (
	defaultPollInterval   = time.Second
	defaultRetryInterval  = time.Second
	defaultPublishTimeout = 30 * time.Second
)

// errForwarderClosed is returned by Run on a Forwarder that was closed.
var errForwarderClosed = errors.New("outbox: forwarder closed")

// Names of the forwarder's options.
const (
	optPoll    = "WithPollInterval"
	optRetry   = "WithRetryInterval"
	optTimeout = "WithPublishTimeout"
)

// WithLogger sets the logger of the forwarder, its router and its
// subscriber (default: discard). Failed publishes are logged at error
// level. A Forwarder option.
func WithLogger(l *slog.Logger) Option {
	return options.Func[options.Outbox](func(s *options.Set) error { return s.PutLogger(ErrInvalidOption, l) })
}

// WithPollInterval sets how long an idle forwarder waits before it looks
// for new rows again (default 1s): the latency of an event published while
// the outbox is empty. Each look is one short transaction.
func WithPollInterval(d time.Duration) Option {
	return options.Func[options.Outbox](func(s *options.Set) error {
		return s.PutAtLeast(ErrInvalidOption, optPoll, "poll interval", d, time.Millisecond)
	})
}

// WithRetryInterval sets how long the forwarder waits before it publishes
// an event again after its publisher failed, and before it queries again
// after a database error (default 1s). It retries for as long as it runs.
func WithRetryInterval(d time.Duration) Option {
	return options.Func[options.Outbox](func(s *options.Set) error {
		return s.PutAtLeast(ErrInvalidOption, optRetry, "retry interval", d, time.Millisecond)
	})
}

// WithPublishTimeout sets how long the forwarding of one event (its publish
// and the retries after failures) may keep the forwarder's read transaction
// open before the forwarder gives it up, commits what it forwarded and
// tries the event again in a new transaction (default 30s, watermill-sql's
// AckDeadline). It is also the deadline of the context the destination
// publisher gets. A shorter one shortens the pause that a failing
// destination imposes on every other reader of the server (see the package
// doc); it must stay above the longest successful publish, or the event is
// sent again: a duplicate, never a loss.
func WithPublishTimeout(d time.Duration) Option {
	return options.Func[options.Outbox](func(s *options.Set) error {
		return s.PutAtLeast(ErrInvalidOption, optTimeout, "publish timeout", d, time.Millisecond)
	})
}

// Forwarder publishes the committed events of an outbox to their
// destination topics on a publisher: Watermill's forwarder.Forwarder on
// watermill-sql's subscriber. See the package doc for its guarantees.
type Forwarder struct {
	table string
	fwd   *forwarder.Forwarder
	sub   *subscriber

	mu      sync.Mutex
	started bool
	closed  bool
	done    chan struct{} // closed when Run returns
}

// Forwarder returns a forwarder of this outbox's events to pub, which must
// not be nil. Run starts it. The forwarder never closes pub: close it after
// the forwarder.
func (o *Outbox) Forwarder(pub message.Publisher, opts ...Option) (*Forwarder, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: nil destination publisher", ErrInvalidOption)
	}
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "Outbox.Forwarder", options.Logger, optPoll, optRetry, optTimeout); err != nil {
		return nil, err
	}
	c := struct {
		logger               *slog.Logger
		poll, retry, timeout time.Duration
	}{
		logger:  options.Get(set, options.Logger, slog.New(slog.DiscardHandler)),
		poll:    options.Get(set, optPoll, defaultPollInterval),
		retry:   options.Get(set, optRetry, defaultRetryInterval),
		timeout: options.Get(set, optTimeout, defaultPublishTimeout),
	}
	logger := watermill.NewSlogLogger(c.logger.With("outbox", o.table))
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(o.db), wsql.SubscriberConfig{
		ConsumerGroup:  consumerGroup,
		AckDeadline:    &c.timeout,
		PollInterval:   c.poll,
		ResendInterval: c.retry,
		RetryInterval:  c.retry,
		SchemaAdapter:  o.schema,
		OffsetsAdapter: o.offsets,
		// InitializeSchema stays off: Migrate is the only DDL.
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("outbox: forwarder subscriber: %w", err)
	}
	s := &subscriber{Subscriber: sub}
	fwd, err := forwarder.NewForwarder(s, pub, logger, forwarder.Config{
		ForwarderTopic: o.table,
		HandlerName:    "surely_outbox_forwarder",
		// An envelope that cannot be unwrapped (a row written by something
		// else than Publisher) is retried, never dropped.
		AckWhenCannotUnwrap: false,
	})
	if err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("outbox: forwarder: %w", err)
	}
	return &Forwarder{table: o.table, fwd: fwd, sub: s, done: make(chan struct{})}, nil
}

// Run forwards events until ctx is done or Close is called, then returns
// nil. It returns an error at once when it cannot start: the tables are
// missing (Migrate), the database does not answer, or the forwarder already
// ran or was closed: a Forwarder runs once. Database
// and publish errors while it runs are logged and retried, not returned.
func (f *Forwarder) Run(ctx context.Context) error {
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		return errForwarderClosed
	case f.started:
		f.mu.Unlock()
		return errors.New("outbox: Forwarder.Run called twice")
	}
	f.started = true
	f.mu.Unlock()
	defer close(f.done)

	err := f.fwd.Run(ctx)
	// The router closes the subscriber on Close, not always when ctx is done.
	err = errors.Join(err, f.sub.Close())
	if serr := f.sub.subscribeErr(); serr != nil && ctx.Err() == nil {
		return fmt.Errorf("outbox: forwarder cannot read %s: %w", f.table, serr)
	}
	if err != nil {
		return fmt.Errorf("outbox: forwarder %s: %w", f.table, err)
	}
	return nil
}

// Close stops the forwarder: it waits for the event being published (at
// most 30 s, Watermill's router close timeout) and for Run to return. Its
// offsets are committed up to the last event acked; the rest is forwarded
// again by the next forwarder. It is idempotent, and stops a forwarder that
// never ran for good.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	started := f.started
	f.mu.Unlock()
	if !started {
		// No router running: Watermill's Router.Close would wait its close
		// timeout for a handler that never starts.
		return f.sub.Close()
	}
	// Router.Close while Router.Run is still subscribing would hold the
	// router's lock that Run needs: wait until it runs (or gave up).
	select {
	case <-f.fwd.Running():
	case <-f.done:
	}
	err := f.fwd.Close()
	<-f.done
	if err != nil {
		return fmt.Errorf("outbox: close forwarder %s: %w", f.table, err)
	}
	return nil
}

// subscriber is watermill-sql's subscriber whose Subscribe does not fail:
// it keeps the error and returns a closed channel, so that Watermill's
// router stops at once and cleanly (a failed Subscribe leaves the router
// waiting for a handler that never starts), and Run returns the error.
type subscriber struct {
	*wsql.Subscriber
	mu  sync.Mutex
	err error
}

func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	ch, err := s.Subscriber.Subscribe(ctx, topic)
	if err == nil {
		return ch, nil
	}
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	closed := make(chan *message.Message)
	close(closed)
	return closed, nil
}

func (s *subscriber) subscribeErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
