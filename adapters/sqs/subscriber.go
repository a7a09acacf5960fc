package sqs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/surely-dev/surely/delivery"
)

// nackTimeout bounds the visibility change of a nack.
const nackTimeout = 10 * time.Second

// Subscriber is a Watermill subscriber on Amazon SQS: watermill-aws'
// subscriber, configured for at-least-once delivery, whose messages carry
// surely's delivery facts (see the package doc).
type Subscriber struct {
	cfg     Config
	logger  *slog.Logger
	inner   *wmsqs.Subscriber
	client  *awssqs.Client
	pending *pending

	closing   chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex // orders Subscribe against Close
	closed bool
	wg     sync.WaitGroup // forwarders and settlers
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a subscriber with cfg's safe defaults. It makes its
// own SQS clients from cfg.AWSConfig and cfg.OptFns. logger may be nil
// (discard).
func NewSubscriber(cfg Config, logger *slog.Logger) (*Subscriber, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Subscriber{
		cfg: cfg, logger: logger, pending: &pending{}, closing: make(chan struct{}),
		client: awssqs.NewFromConfig(cfg.AWSConfig, cfg.OptFns...),
	}
	u := &unmarshaler{inner: cfg.Unmarshaler, pending: s.pending}
	if u.inner == nil {
		u.inner, u.strict = wmsqs.DefaultMarshalerUnmarshaler{}, true
	}
	s.inner, err = wmsqs.NewSubscriber(wmsqs.SubscriberConfig{
		AWSConfig:                   cfg.AWSConfig,
		OptFns:                      cfg.OptFns,
		QueueUrlResolver:            wmsqs.NewGetQueueUrlByNameUrlResolver(wmsqs.GetQueueUrlByNameUrlResolverConfig{}),
		QueueConfigAttributes:       cfg.queueAttributes(),
		GenerateReceiveMessageInput: cfg.receiveInput(),
		ConsumeWorkers:              cfg.Concurrency,
		Unmarshaler:                 u,
	}, watermill.NewSlogLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return s, nil
}

// SubscribeInitialize creates the queue named topic when it does not exist,
// with the VisibilityTimeout of the subscriber's Config.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.inner.SubscribeInitializeWithContext(ctx, topic); err != nil {
		return fmt.Errorf("sqs: initialize queue %q: %w", topic, err)
	}
	return nil
}

// Subscribe consumes the queue named topic (created when missing, as
// SubscribeInitialize does). Each message carries a delivery.Info and a
// delivery.Control in its context, which derives from ctx. The channel is
// closed when ctx is done or on Close.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := s.inner.SubscribeInitializeWithContext(ctx, topic); err != nil {
		return nil, fmt.Errorf("sqs: initialize queue %q: %w", topic, err)
	}
	url, err := s.inner.GetQueueUrl(ctx, topic) // cached from here on
	if err != nil {
		return nil, fmt.Errorf("sqs: queue %q: %w", topic, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	in, err := s.inner.Subscribe(sctx, topic)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sqs: subscribe %q: %w", topic, err)
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go s.forward(sctx, cancel, string(*url), in, out)
	return out, nil
}

// forward hands out each message of in with its delivery facts in its
// context, and starts watching for its nack. Only forward sends on out
// and closes it.
func (s *Subscriber) forward(ctx context.Context, cancel context.CancelFunc, queueURL string,
	in <-chan *message.Message, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	defer cancel()
	for msg := range in {
		r := s.pending.take(msg)
		if r == nil {
			// Not unmarshaled by this subscriber: cannot happen; let it
			// come back after its visibility timeout.
			s.logger.ErrorContext(ctx, "surely/sqs: message without delivery facts", "message_uuid", msg.UUID)
			continue
		}
		r.msg, r.client, r.queueURL, r.visibility = msg, s.client, queueURL, s.cfg.VisibilityTimeout
		mctx := msg.Context()
		if r.hasInfo {
			mctx = delivery.WithInfo(mctx, r.info)
		}
		msg.SetContext(delivery.WithControl(mctx, r))
		select {
		case out <- msg:
		case <-s.closing:
			return // watermill-aws leaves it; it comes back after its visibility timeout
		case <-ctx.Done():
			return
		}
		s.wg.Add(1)
		go s.settle(msg, r)
	}
}

// settle turns a nack into a visibility change (watermill-aws does nothing
// on a nack); watermill-aws deletes an acked message itself.
func (s *Subscriber) settle(msg *message.Message, r *received) {
	defer s.wg.Done()
	select {
	case <-msg.Acked():
		r.acked()
	case <-msg.Nacked():
		ctx, cancel := context.WithTimeout(context.Background(), nackTimeout)
		defer cancel()
		if err := r.nack(ctx); err != nil {
			s.logger.WarnContext(msg.Context(), "surely/sqs: nack failed; the message comes back after its visibility timeout",
				"message_uuid", msg.UUID, "error", err)
		}
	case <-s.closing:
		// Left as it is: it comes back after its visibility timeout.
	}
}

// Close stops receiving and waits for the receivers to stop. Messages not
// acked by then come back after their visibility timeout. Close is safe to
// call more than once (the router calls it too).
func (s *Subscriber) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		err = s.inner.Close()
		s.wg.Wait()
		s.pending.clear()
	})
	return err
}
