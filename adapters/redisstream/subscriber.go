package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/drain"
)

// callTimeout bounds each Redis call the subscriber makes itself (ack,
// delivery count, idle refresh).
const callTimeout = 5 * time.Second

// Subscriber is a Watermill subscriber on Redis Streams consumer groups,
// built on watermill-redisstream's, with safe defaults and the delivery
// facts surely uses (see the package doc). It owns its Redis client.
type Subscriber struct {
	cfg    subscriberConfig
	logger *slog.Logger
	client redis.UniversalClient
	inner  *wmredis.Subscriber
	reads  atomic.Uint64
	hook   entryHook

	closing   chan struct{} // stop handing out messages
	abandon   chan struct{} // stop waiting for acks
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex // orders wg.Add in Subscribe before wg.Wait in Close
	closed bool
	wg     sync.WaitGroup // relays
}

var _ message.Subscriber = (*Subscriber)(nil)

// errSubscriberClosed is returned by Subscribe after Close.
var errSubscriberClosed = fmt.Errorf("redisstream: subscriber: %w", delivery.ErrClosed)

// NewSubscriber returns a subscriber in the consumer group group, with a
// Redis client of its own made from redisOpts (redis.NewUniversalClient: a
// single node, Sentinel or Cluster). Close closes that client. It never
// takes a caller's client, because watermill-redisstream closes the client
// it is given: one shared with an idempotency store would close under it.
//
// Every Subscriber with the same group shares the stream's entries
// (competing consumers); the group is created at the start of the stream
// ("0") when missing, so a group created after messages were published
// still gets them.
//
// It takes WithConsumer, delivery.WithAckWait (at least 100ms),
// WithClaimInterval, delivery.WithResendInterval, WithMarshaler,
// delivery.WithLogger and delivery.WithCloseTimeout; any other option is an error wrapping
// delivery.ErrInvalidOption.
func NewSubscriber(redisOpts *redis.UniversalOptions, group string, opts ...delivery.Option) (*Subscriber, error) {
	if redisOpts == nil {
		return nil, fmt.Errorf("%w: nil Redis options", delivery.ErrInvalidOption)
	}
	cfg, err := newSubscriberConfig(group, opts)
	if err != nil {
		return nil, err
	}
	logger := cfg.logger
	client := redis.NewUniversalClient(redisOpts)
	s := &Subscriber{
		cfg: cfg, logger: logger, client: client,
		closing: make(chan struct{}), abandon: make(chan struct{}),
	}
	s.hook = entryHook{closing: s.closing, reading: new(atomic.Int64), postponed: new(sync.Map)}
	client.AddHook(s.hook)
	s.inner, err = wmredis.NewSubscriber(wmredis.SubscriberConfig{
		Client:                        sharedClient{client},
		Unmarshaller:                  unmarshaler{inner: cfg.unmarshaler, reads: &s.reads},
		Consumer:                      cfg.consumer,
		ConsumerGroup:                 cfg.group,
		NackResendSleep:               wmredis.NoSleep, // settle waits, per message
		ClaimInterval:                 cfg.claimInterval,
		MaxIdleTime:                   cfg.maxIdleTime,
		OldestId:                      "0",
		DisableIndefiniteInitialBlock: true,
	}, watermill.NewSlogLogger(logger))
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redisstream: subscriber: %w", err)
	}
	return s, nil
}

// Subscribe creates the consumer group of topic when missing (at the start
// of the stream) and consumes the stream, one entry at a time. Each
// message carries a delivery.Info and a delivery.Control in its context,
// which derives from ctx. The channel is closed when ctx is done or on
// Close.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errSubscriberClosed
	}
	in, err := s.inner.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("redisstream: subscribe %q: %w", topic, err)
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go s.relay(ctx, topic, in, out)
	return out, nil
}

// relay hands out every message watermill-redisstream delivers as a fresh
// message whose context carries the delivery facts, and settles the
// original as the consumer settled it. watermill-redisstream waits for
// each message to be settled before it delivers the next (or resends a
// nacked one), so the relay does too. Only relay sends on out and closes
// it.
func (s *Subscriber) relay(ctx context.Context, topic string, in <-chan *message.Message, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	var lastRead string
	lastCount := 0
	for {
		var im *message.Message
		select {
		case m, ok := <-in:
			if !ok {
				return
			}
			im = m
		case <-s.closing:
			return
		case <-ctx.Done():
			return
		}
		id, read := im.Metadata.Get(mdID), im.Metadata.Get(mdRead)
		_, claimed := im.Metadata[mdClaimed]
		var count int
		switch {
		case read == lastRead:
			count = lastCount // a resend after a nack, counted at the nack
		case claimed:
			count = s.pendingCount(ctx, topic, id)
		default:
			count = 1 // a new entry (XREADGROUP >)
		}
		lastRead, lastCount = read, count

		r := newReceived(s, topic, id)
		om := im.Copy()
		delete(om.Metadata, mdID)
		delete(om.Metadata, mdRead)
		delete(om.Metadata, mdClaimed)
		mctx, cancel := context.WithCancel(ctx)
		mctx = delivery.WithInfo(mctx, delivery.Info{Count: count, Redelivered: count > 1 || claimed})
		om.SetContext(delivery.WithControl(mctx, r))
		select {
		case out <- om:
		case <-s.closing:
			cancel()
			return // left pending: another consumer claims it after the ack wait
		case <-ctx.Done():
			cancel()
			return
		}
		ok := s.settle(topic, im, om, r, &lastCount)
		cancel()
		if !ok {
			return
		}
	}
}

// settle waits until om is acked or nacked and settles im the same way:
// an ack is XACKed (and confirmed) here; a nack counts one more delivery
// in the pending entries list, waits (NackAfter's delay, else the resend
// interval), and lets watermill-redisstream resend the message. It returns
// false when Close gave up waiting.
func (s *Subscriber) settle(topic string, im, om *message.Message, r *received, count *int) bool {
	select {
	case <-om.Acked():
		if r.id != "" {
			if err := s.ack(topic, r.id); err != nil {
				s.logger.WarnContext(om.Context(), "surely/redisstream: ack failed; the entry stays pending and is claimed again after the ack wait",
					"stream", topic, "entry_id", r.id, "message_uuid", om.UUID, "error", err)
			}
		}
		im.Ack()
		return true
	case <-om.Nacked():
		if d := r.resendDelay(); d > holdLimit && r.id != "" {
			return s.postpone(topic, im, om, r)
		}
		*count++
		if r.id != "" {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			n, err := s.touch(ctx, topic, r.id, true)
			cancel()
			if err == nil {
				*count = n
			}
		}
		if d := r.resendDelay(); d > 0 && !s.hold(topic, r.id, d) {
			return false
		}
		im.Nack()
		return true
	case <-s.abandon:
		return false // left pending: claimed again after the ack wait
	}
}

// postpone leaves the entry of a message nacked with a delay beyond
// holdLimit pending, unacked, and lets watermill-redisstream go on to the
// next entry: the entry's idle time restarts now, and a consumer of the
// group (this one included) claims it once it was idle for the ack wait.
// watermill-redisstream XACKs a message it sees acked; the hook drops that
// XACK for a postponed entry. It returns false when the subscriber closes.
func (s *Subscriber) postpone(topic string, im, om *message.Message, r *received) bool {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	_, err := s.touch(ctx, topic, r.id, false)
	cancel()
	if err != nil {
		// Claimed by another consumer, acked, or Redis failed: in each
		// case the entry is not this consumer's to resend now.
		s.logger.WarnContext(om.Context(), "surely/redisstream: could not restart a postponed entry's idle time",
			"stream", topic, "entry_id", r.id, "message_uuid", om.UUID, "error", err)
	}
	s.hook.postponed.Store(postponedKey(topic, r.id), struct{}{})
	im.Ack()
	// Paced as a resend would be: an open breaker nacks every message
	// with a long delay, and would otherwise sweep the stream.
	if p := s.cfg.nackResendSleep; p > 0 {
		t := time.NewTimer(p)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closing:
			return false
		}
	}
	return true
}

// ack XACKs entry id, trying three times.
func (s *Subscriber) ack(topic, id string) error {
	var err error
	for i := range 3 {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), ownAck{}, true), callTimeout)
		err = s.client.XAck(ctx, topic, s.cfg.group, id).Err()
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// hold waits d before a nacked message is handed out again, keeping its
// entry claimed (idle time reset every third of the ack wait) so that no other
// consumer takes it meanwhile. It returns false when the subscriber closes.
func (s *Subscriber) hold(topic, id string, d time.Duration) bool {
	done := time.NewTimer(d)
	defer done.Stop()
	tick := time.NewTicker(s.cfg.maxIdleTime / 3)
	defer tick.Stop()
	for {
		select {
		case <-done.C:
			return true
		case <-tick.C:
			if id != "" {
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				_, _ = s.touch(ctx, topic, id, false) // a failure: another consumer may take it, harmlessly
				cancel()
			}
		case <-s.closing:
			return false
		}
	}
}

// Close stops handing out messages, waits (up to the close timeout,
// delivery.WithCloseTimeout) for those in flight to be acked or nacked,
// then closes watermill-redisstream's subscriber and the Redis client.
// Entries still unacked then stay pending and are claimed by another
// consumer after the ack wait. Close is safe to
// call more than once (the router calls it too).
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		if drain.Wait(&s.wg, s.cfg.closeTimeout, s.abandon) {
			s.logger.Warn("surely/redisstream: messages still in flight at close; they stay pending")
		}
		s.closeErr = s.inner.Close()
		// The read loop's last XREADGROUP (at most its 100ms block) ends
		// before the client closes; see entryHook.
		deadline := time.Now().Add(callTimeout)
		for s.hook.reading.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := s.client.Close(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}
