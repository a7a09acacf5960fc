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

// Names of this package's options (see internal/options.Load): qualified
// with the package, so that another adapter's option of the same name is
// refused by name.
const (
	optMarshaler   = "nats.WithMarshaler"
	optNATSOptions = "nats.WithNATSOptions"
)

// minAckWait is the shortest delivery.WithAckWait accepted.
const minAckWait = 100 * time.Millisecond

// WithMarshaler sets the conversion between Watermill messages and NATS
// messages (default: watermill-nats' NATSMarshaler, metadata as headers).
// Give subscribers the same one as the publisher. A Subscriber's Unmarshal
// gets a *nats.Msg with the subject, reply subject, headers and data of the
// delivery; it is not bound to a subscription, so it cannot ack (surely
// does).
func WithMarshaler(m wmnats.MarshalerUnmarshaler) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return options.PutNotNil(s, delivery.ErrInvalidOption, optMarshaler, m) })
}

// WithNATSOptions sets options passed to nats.Connect (name, credentials,
// TLS, reconnect policy). A second WithNATSOptions replaces the first.
func WithNATSOptions(o ...nats.Option) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		for _, f := range o {
			if f == nil {
				return fmt.Errorf("%w: %s: nil nats.Option", delivery.ErrInvalidOption, optNATSOptions)
			}
		}
		s.Put(optNATSOptions, slices.Clone(o))
		return nil
	})
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
	const who = "nats.NewSubscriber"
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, options.Logger, options.CloseTimeout,
		options.Concurrency, options.AckWait, optMarshaler, optNATSOptions)
	if err != nil {
		return subscriberConfig{}, err
	}
	c := subscriberConfig{
		consumer:     consumer,
		concurrency:  options.Get(s, options.Concurrency, 1),
		marshaler:    options.Get[wmnats.MarshalerUnmarshaler](s, optMarshaler, &wmnats.NATSMarshaler{}),
		natsOptions:  options.Get[[]nats.Option](s, optNATSOptions, nil),
		logger:       options.Get(s, options.Logger, options.Warnings()),
		closeTimeout: options.Get(s, options.CloseTimeout, options.DefaultCloseTimeout),
	}
	c.ackWait, err = options.AtLeast(s, delivery.ErrInvalidOption, who, options.AckWait, 30*time.Second, minAckWait)
	return c, err
}

// publisherConfig is what a Publisher's options set.
type publisherConfig struct {
	marshaler   wmnats.MarshalerUnmarshaler
	natsOptions []nats.Option
	logger      *slog.Logger
}

func newPublisherConfig(opts []delivery.Option) (publisherConfig, error) {
	s, err := options.Load(delivery.ErrInvalidOption, "nats.NewPublisher", opts, options.Logger,
		optMarshaler, optNATSOptions)
	if err != nil {
		return publisherConfig{}, err
	}
	return publisherConfig{
		marshaler:   options.Get[wmnats.MarshalerUnmarshaler](s, optMarshaler, &wmnats.NATSMarshaler{}),
		natsOptions: options.Get[[]nats.Option](s, optNATSOptions, nil),
		logger:      options.Get(s, options.Logger, options.Warnings()),
	}, nil
}
