package nats

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// Names of this package's options (see internal/options). WithConcurrency
// and WithAckWait mean what they mean in every adapter that has them, and
// record under the same names. WithMarshaler's value has a type of this
// package's broker, so it records under a qualified name: another
// adapter's WithMarshaler given here is refused as an option this
// constructor does not take.
const (
	optConcurrency = "WithConcurrency"
	optAckWait     = "WithAckWait"
	optMarshaler   = "nats.WithMarshaler"
	optNATSOptions = "WithNATSOptions"
)

// minAckWait is the shortest ack wait accepted.
const minAckWait = 100 * time.Millisecond

// WithConcurrency sets how many messages of one topic a Subscriber has in
// flight at once: at least 1, default 1. It is also the consumer's
// MaxAckPending and the most a pull fetches, so the server never hands out
// messages that wait in the client while their ack timers run.
// Subscriber only.
func WithConcurrency(n int) delivery.Option {
	return func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d is not positive", delivery.ErrInvalidOption, n)
		}
		s.Put(optConcurrency, n)
		return nil
	}
}

// WithAckWait sets how long the server waits for the ack of a delivered
// message before it redelivers it (the consumer's AckWait): at least
// 100ms, default 30s. surely's dedup step extends it (InProgress) while
// the handler runs, so it needs to exceed only the gap between two
// extensions (the dedup lease/3), not the longest handler. Subscriber
// only.
func WithAckWait(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutAtLeast(delivery.ErrInvalidOption, optAckWait, "ack wait", d, minAckWait)
	}
}

// WithMarshaler sets the conversion between Watermill messages and NATS
// messages (default: watermill-nats' NATSMarshaler, metadata as headers).
// Give subscribers the same one as the publisher. A Subscriber's Unmarshal
// gets a *nats.Msg with the subject, reply subject, headers and data of the
// delivery; it is not bound to a subscription, so it cannot ack (surely
// does).
func WithMarshaler(m wmnats.MarshalerUnmarshaler) delivery.Option {
	return func(s *options.Set) error {
		if m == nil {
			return fmt.Errorf("%w: nil marshaler", delivery.ErrInvalidOption)
		}
		s.Put(optMarshaler, m)
		return nil
	}
}

// WithNATSOptions sets options passed to nats.Connect (name, credentials,
// TLS, reconnect policy). A second WithNATSOptions replaces the first.
func WithNATSOptions(o ...nats.Option) delivery.Option {
	return func(s *options.Set) error {
		for _, f := range o {
			if f == nil {
				return fmt.Errorf("%w: nil nats.Option", delivery.ErrInvalidOption)
			}
		}
		s.Put(optNATSOptions, slices.Clone(o))
		return nil
	}
}

// subscriberConfig is what a Subscriber's options set.
type subscriberConfig struct {
	consumer     string
	ackWait      time.Duration
	concurrency  int
	marshaler    wmnats.MarshalerUnmarshaler
	natsOptions  []nats.Option
	logger       *slog.Logger
	closeTimeout time.Duration
}

func newSubscriberConfig(consumer string, opts []delivery.Option) (subscriberConfig, error) {
	if !validName(consumer) {
		return subscriberConfig{}, fmt.Errorf("%w: consumer %q must be non-empty, at most %d characters, of letters, digits, '-' and '_'",
			delivery.ErrInvalidOption, consumer, maxConsumerLen)
	}
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return subscriberConfig{}, err
	}
	if err := s.Check(delivery.ErrInvalidOption, "nats.NewSubscriber", options.Logger, options.CloseTimeout,
		optConcurrency, optAckWait, optMarshaler, optNATSOptions); err != nil {
		return subscriberConfig{}, err
	}
	return subscriberConfig{
		consumer:     consumer,
		ackWait:      options.Get(s, optAckWait, 30*time.Second),
		concurrency:  options.Get(s, optConcurrency, 1),
		marshaler:    options.Get[wmnats.MarshalerUnmarshaler](s, optMarshaler, &wmnats.NATSMarshaler{}),
		natsOptions:  options.Get[[]nats.Option](s, optNATSOptions, nil),
		logger:       options.Get(s, options.Logger, options.Warnings()),
		closeTimeout: options.Get(s, options.CloseTimeout, delivery.DefaultCloseTimeout),
	}, nil
}

// publisherConfig is what a Publisher's options set.
type publisherConfig struct {
	marshaler   wmnats.MarshalerUnmarshaler
	natsOptions []nats.Option
	logger      *slog.Logger
}

func newPublisherConfig(opts []delivery.Option) (publisherConfig, error) {
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return publisherConfig{}, err
	}
	if err := s.Check(delivery.ErrInvalidOption, "nats.NewPublisher", options.Logger,
		optMarshaler, optNATSOptions); err != nil {
		return publisherConfig{}, err
	}
	return publisherConfig{
		marshaler:   options.Get[wmnats.MarshalerUnmarshaler](s, optMarshaler, &wmnats.NATSMarshaler{}),
		natsOptions: options.Get[[]nats.Option](s, optNATSOptions, nil),
		logger:      options.Get(s, options.Logger, options.Warnings()),
	}, nil
}
