package redisstream

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// Names of this package's options (see internal/options.Load): qualified
// with the package, so that another adapter's option of the same name is
// refused by name.
const (
	optConsumer      = "redisstream.WithConsumer"
	optClaimInterval = "redisstream.WithClaimInterval"
	optMarshaler     = "redisstream.WithMarshaler"
)

// minAckWait is the shortest delivery.WithAckWait accepted.
const minAckWait = 100 * time.Millisecond

// WithConsumer names this consumer in the group (default: the host name
// and a random suffix). Entries a consumer leaves pending are claimed by
// others after the ack wait, whatever its name. Subscriber only.
func WithConsumer(name string) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		if name == "" {
			return fmt.Errorf("%w: %s: empty consumer name", delivery.ErrInvalidOption, optConsumer)
		}
		s.Put(optConsumer, name)
		return nil
	})
}

// WithClaimInterval sets how often the subscriber looks for entries idle
// longer than the ack wait (delivery.WithAckWait): positive and at most
// the ack wait, default a quarter of it. Subscriber only.
func WithClaimInterval(d time.Duration) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		return s.PutPositive(delivery.ErrInvalidOption, optClaimInterval, optClaimInterval, d)
	})
}

// WithMarshaler sets how Watermill messages and stream entries convert,
// for the Publisher (Marshal) and the Subscriber (Unmarshal); give both
// sides the same one. The default is watermill-redisstream's
// DefaultMarshallerUnmarshaller (UUID, payload and msgpack metadata
// fields). The Subscriber marks a message its Unmarshal fails or panics on
// undecodable; that never ends the subscription.
func WithMarshaler(m wmredis.MarshallerUnmarshaller) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return options.PutNotNil(s, delivery.ErrInvalidOption, optMarshaler, m) })
}

// subscriberConfig is what a Subscriber's options set.
type subscriberConfig struct {
	group           string
	consumer        string
	maxIdleTime     time.Duration // delivery.WithAckWait
	claimInterval   time.Duration
	nackResendSleep time.Duration // delivery.WithResendInterval
	unmarshaler     wmredis.Unmarshaller
	logger          *slog.Logger
	closeTimeout    time.Duration
}

func newSubscriberConfig(group string, opts []delivery.Option) (subscriberConfig, error) {
	if group == "" {
		return subscriberConfig{}, fmt.Errorf("%w: empty group", delivery.ErrInvalidOption)
	}
	const who = "redisstream.NewSubscriber"
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, options.Logger, options.CloseTimeout,
		optConsumer, options.AckWait, optClaimInterval, options.ResendInterval, optMarshaler)
	if err != nil {
		return subscriberConfig{}, err
	}
	c := subscriberConfig{
		group:           group,
		consumer:        options.Get(s, optConsumer, ""),
		nackResendSleep: options.Get(s, options.ResendInterval, 100*time.Millisecond),
		unmarshaler:     options.Get[wmredis.MarshallerUnmarshaller](s, optMarshaler, wmredis.DefaultMarshallerUnmarshaller{}),
		logger:          options.Get(s, options.Logger, options.Warnings()),
		closeTimeout:    options.Get(s, options.CloseTimeout, options.DefaultCloseTimeout),
	}
	if c.maxIdleTime, err = options.AtLeast(s, delivery.ErrInvalidOption, who, options.AckWait, 30*time.Second, minAckWait); err != nil {
		return c, err
	}
	c.claimInterval = options.Get(s, optClaimInterval, c.maxIdleTime/4)
	if c.claimInterval > c.maxIdleTime {
		return c, fmt.Errorf("%w: %s: %s(%v) is longer than the ack wait %v",
			delivery.ErrInvalidOption, who, optClaimInterval, c.claimInterval, c.maxIdleTime)
	}
	if c.consumer == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "consumer"
		}
		c.consumer = host + "-" + watermill.NewShortUUID()
	}
	return c, nil
}

// publisherConfig is what a Publisher's options set.
type publisherConfig struct {
	marshaler wmredis.Marshaller
	logger    *slog.Logger
}

func newPublisherConfig(opts []delivery.Option) (publisherConfig, error) {
	s, err := options.Load(delivery.ErrInvalidOption, "redisstream.NewPublisher", opts, options.Logger, optMarshaler)
	if err != nil {
		return publisherConfig{}, err
	}
	return publisherConfig{
		marshaler: options.Get[wmredis.MarshallerUnmarshaller](s, optMarshaler, wmredis.DefaultMarshallerUnmarshaller{}),
		logger:    options.Get(s, options.Logger, options.Warnings()),
	}, nil
}
