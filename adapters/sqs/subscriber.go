package sqs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/drain"
)

// nackTimeout bounds the visibility change of a nack, and the deletion of
// an acked message.
const nackTimeout = 10 * time.Second

// Subscriber is a Watermill subscriber on Amazon SQS: watermill-aws'
// subscriber, configured for at-least-once delivery, whose messages carry
// surely's delivery facts (see the package doc).
type Subscriber struct {
	cfg     subscriberConfig
	inner   *wmsqs.Subscriber
	client  *awssqs.Client
	pending *pending

	closing   chan struct{} // stop handing out messages
	abandon   chan struct{} // stop waiting for acks
	closeOnce sync.Once

	mu     sync.Mutex // orders Subscribe against Close
	closed bool
	wg     sync.WaitGroup // forwarders and settlers
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a subscriber with safe defaults. It makes its own
// SQS clients from cfg (its region and credentials, required) and the
// functions of WithClientOptions. It takes WithClientOptions,
// delivery.WithAckWait (whole seconds from 1s to 12h), WithWaitTime,
// delivery.WithConcurrency, WithMarshaler, delivery.WithCloseTimeout and
// delivery.WithLogger; any other option is refused with an error
// wrapping delivery.ErrInvalidOption.
func NewSubscriber(cfg aws.Config, opts ...delivery.Option) (*Subscriber, error) {
	c, err := newSubscriberConfig(cfg, opts)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{
		cfg: c, pending: &pending{}, closing: make(chan struct{}), abandon: make(chan struct{}),
		client: awssqs.NewFromConfig(c.aws, c.clientOpts...),
	}
	u := &unmarshaler{inner: c.unmarshaler, pending: s.pending}
	if u.inner == nil {
		u.inner, u.strict = wmsqs.DefaultMarshalerUnmarshaler{}, true
	}
	s.inner, err = wmsqs.NewSubscriber(wmsqs.SubscriberConfig{
		AWSConfig:                   c.aws,
		OptFns:                      c.clientOpts,
		QueueUrlResolver:            wmsqs.NewGetQueueUrlByNameUrlResolver(wmsqs.GetQueueUrlByNameUrlResolverConfig{}),
		QueueConfigAttributes:       c.queueAttributes(),
		GenerateReceiveMessageInput: c.receiveInput(),
		ConsumeWorkers:              c.concurrency,
		Unmarshaler:                 u,
	}, watermill.NewSlogLogger(c.logger))
	if err != nil {
		return nil, fmt.Errorf("%w: sqs.NewSubscriber: %w", delivery.ErrInvalidOption, err)
	}
	return s, nil
}

// SubscribeInitialize creates the queue named topic when it does not exist,
// with the subscriber's visibility timeout (delivery.WithAckWait).
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
		return nil, delivery.ErrClosed
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
	go s.forward(ctx, sctx, cancel, string(*url), in, out)
	return out, nil
}

// forward hands out a copy of each message of in, with its delivery facts
// in its context, and starts settling it. The copy's context derives from
// ctx (Subscribe's), not from watermill-aws' message context, which
// watermill-aws cancels as soon as it is closed: a handler runs on while
// Close drains. Only forward sends on out and closes it.
func (s *Subscriber) forward(ctx, sctx context.Context, cancel context.CancelFunc, queueURL string,
	in <-chan *message.Message, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	defer cancel()
	for im := range in {
		r := s.pending.take(im)
		if r == nil {
			// Not unmarshaled by this subscriber: cannot happen; let it
			// come back after its visibility timeout.
			s.cfg.logger.ErrorContext(ctx, "surely/sqs: message without delivery facts", "message_uuid", im.UUID)
			continue
		}
		om := im.Copy()
		r.msg, r.client, r.queueURL, r.visibility = om, s.client, queueURL, s.cfg.visibility
		mctx, mcancel := context.WithCancel(ctx)
		if r.hasInfo {
			mctx = delivery.WithInfo(mctx, r.info)
		}
		om.SetContext(delivery.WithControl(mctx, r))
		select {
		case out <- om:
		case <-s.closing:
			mcancel()
			s.release(om, r) // received, never handed out: visible again at once
			return
		case <-sctx.Done():
			mcancel()
			s.release(om, r)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer mcancel()
			s.settle(im, om, r)
		}()
	}
}

// settle waits until om is acked or nacked and settles the SQS message: an
// ack deletes it here (watermill-aws would delete it only while it is not
// closed), a nack changes its visibility (watermill-aws does nothing on a
// nack). Then it nacks im, watermill-aws' message, which lets its receiver
// go on without a call to SQS.
func (s *Subscriber) settle(im, om *message.Message, r *received) {
	defer im.Nack()
	select {
	case <-om.Acked():
		r.acked()
		ctx, cancel := context.WithTimeout(context.Background(), nackTimeout)
		defer cancel()
		if err := s.delete(ctx, r); err != nil {
			s.cfg.logger.WarnContext(om.Context(), "surely/sqs: delete of an acked message failed; it comes back after its visibility timeout",
				"message_uuid", om.UUID, "error", err)
		}
	case <-om.Nacked():
		s.release(om, r)
	case <-s.abandon:
		// Left as it is: it comes back after its visibility timeout.
	}
}

// delete deletes the acked message of r from its queue.
func (s *Subscriber) delete(ctx context.Context, r *received) error {
	_, err := s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{
		QueueUrl: aws.String(r.queueURL), ReceiptHandle: aws.String(r.receipt),
	})
	if err != nil {
		return fmt.Errorf("sqs: delete message: %w", err)
	}
	return nil
}

// release nacks the message of r: visible again at once, or after
// NackAfter's delay.
func (s *Subscriber) release(om *message.Message, r *received) {
	ctx, cancel := context.WithTimeout(context.Background(), nackTimeout)
	defer cancel()
	if err := r.nack(ctx); err != nil {
		s.cfg.logger.WarnContext(om.Context(), "surely/sqs: nack failed; the message comes back after its visibility timeout",
			"message_uuid", om.UUID, "error", err)
	}
}

// Close stops receiving and handing out messages (one received but not
// handed out is made visible again at once; one watermill-aws was still
// receiving comes back after its visibility timeout), waits up to the
// close timeout (delivery.WithCloseTimeout, default 30s) for those in
// flight to be acked or nacked (an ack deletes its message), then cancels
// the contexts of those still running: their messages come back after
// their visibility timeout. Close is safe to call more than once
// (the router calls it too).
func (s *Subscriber) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		err = s.inner.Close() // no more receives; it leaves its messages to settle
		if drain.Wait(&s.wg, s.cfg.closeTimeout, s.abandon) {
			s.cfg.logger.Warn("surely/sqs: messages still in flight at close; they come back after their visibility timeout")
		}
		s.pending.clear()
	})
	return err
}
