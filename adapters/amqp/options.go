package amqp

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// Names of this package's options (see internal/options.Load): qualified
// with the package, so that another adapter's option of the same name is
// refused by name.
const (
	optChannels   = "amqp.WithChannels"
	optMarshaler  = "amqp.WithMarshaler"
	optAMQPConfig = "amqp.WithAMQPConfig"
)

// Bounds of the options.
const (
	// maxConcurrency: AMQP's prefetch count is a 16-bit number.
	maxConcurrency = math.MaxUint16
	// maxChannels: RabbitMQ's default channel_max is 2047 per connection.
	maxChannels = 1024
)

// WithChannels sets the size of a Publisher's channel pool: how many
// Publish calls run at once (more wait for a free channel), 1 to 1024,
// default 8. Every channel is in confirm mode, and a Publish holds its
// channel until the broker confirmed, so with one channel publishing is
// sequential (about 1k messages/s measured with confirms). Publisher only.
func WithChannels(n int) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		if n < 1 || n > maxChannels {
			return fmt.Errorf("%w: %s(%d) is not in 1..%d", delivery.ErrInvalidOption, optChannels, n, maxChannels)
		}
		s.Put(optChannels, n)
		return nil
	})
}

// WithMarshaler sets the conversion between Watermill messages and AMQP
// messages (default: watermill-amqp's DefaultMarshaler with metadata as
// string headers, the UUID in the _watermill_message_uuid header,
// persistent delivery mode, and header values that are numbers or
// booleans read as their text, so that other publishers' headers decode).
// Give the Subscriber one compatible with the Publisher's. The Subscriber's
// gets a copy of each delivery without the x-delivery-count header (that
// is in delivery.Info) and without an Acknowledger: surely acks. The
// Publisher refuses a watermill-amqp DefaultMarshaler with
// NotPersistentDeliveryMode: a transient message is lost when the broker
// restarts.
func WithMarshaler(m wmamqp.Marshaler) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return options.PutNotNil(s, delivery.ErrInvalidOption, optMarshaler, m) })
}

// WithAMQPConfig sets the configuration passed to amqp.DialConfig (TLS,
// heartbeat, vhost, connection name). Default: a 10s heartbeat and the
// connection name "surely subscriber" or "surely publisher". Every dial
// uses a copy (with a Properties table of its own), so one *amqp.Config
// may serve a Publisher and a Subscriber.
func WithAMQPConfig(c *amqp.Config) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return options.PutNotNil(s, delivery.ErrInvalidOption, optAMQPConfig, c) })
}

// subscriberConfig is what a Subscriber's options set.
type subscriberConfig struct {
	concurrency  int
	marshaler    wmamqp.Marshaler
	amqpConfig   *amqp.Config
	logger       *slog.Logger
	closeTimeout time.Duration
}

func newSubscriberConfig(opts []delivery.Option) (subscriberConfig, error) {
	const who = "amqp.NewSubscriber"
	s, err := options.Load(delivery.ErrInvalidOption, who, opts,
		options.Logger, options.CloseTimeout, options.Concurrency, optMarshaler, optAMQPConfig)
	if err != nil {
		return subscriberConfig{}, err
	}
	c := subscriberConfig{
		marshaler:    options.Get[wmamqp.Marshaler](s, optMarshaler, defaultMarshaler()),
		amqpConfig:   options.Get[*amqp.Config](s, optAMQPConfig, nil),
		logger:       options.Get(s, options.Logger, options.Warnings()),
		closeTimeout: options.Get(s, options.CloseTimeout, options.DefaultCloseTimeout),
	}
	c.concurrency, err = options.Within(s, delivery.ErrInvalidOption, who, options.Concurrency, 1, 1, maxConcurrency)
	return c, err
}

// publisherConfig is what a Publisher's options set.
type publisherConfig struct {
	channels   int
	marshaler  wmamqp.Marshaler
	amqpConfig *amqp.Config
	logger     *slog.Logger
}

func newPublisherConfig(opts []delivery.Option) (publisherConfig, error) {
	s, err := options.Load(delivery.ErrInvalidOption, "amqp.NewPublisher", opts,
		options.Logger, optChannels, optMarshaler, optAMQPConfig)
	if err != nil {
		return publisherConfig{}, err
	}
	c := publisherConfig{
		channels:   options.Get(s, optChannels, 8),
		marshaler:  options.Get[wmamqp.Marshaler](s, optMarshaler, defaultMarshaler()),
		amqpConfig: options.Get[*amqp.Config](s, optAMQPConfig, nil),
		logger:     options.Get(s, options.Logger, options.Warnings()),
	}
	switch m := c.marshaler.(type) {
	case wmamqp.DefaultMarshaler:
		if m.NotPersistentDeliveryMode {
			return c, fmt.Errorf("%w: a marshaler with NotPersistentDeliveryMode publishes messages a broker restart loses", delivery.ErrInvalidOption)
		}
	case *wmamqp.DefaultMarshaler:
		if m == nil || m.NotPersistentDeliveryMode {
			return c, fmt.Errorf("%w: a nil marshaler, or one with NotPersistentDeliveryMode, cannot publish durably", delivery.ErrInvalidOption)
		}
	}
	return c, nil
}
