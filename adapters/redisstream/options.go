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

// Names of this package's options (see internal/options). WithAckWait
// and WithResendInterval mean what they mean in every adapter that has
// them, and record under the same names. WithMarshaler's and
// WithUnmarshaler's values have types of this package's broker, so they
// record under qualified names: another adapter's WithMarshaler given here
// is refused as an option this constructor does not take.
const (
	optConsumer       = "WithConsumer"
	optAckWait        = "WithAckWait"
	optClaimInterval  = "WithClaimInterval"
	optResendInterval = "WithResendInterval"
	optUnmarshaler    = "redisstream.WithUnmarshaler"
	optMarshaler      = "redisstream.WithMarshaler"
)

// minAckWait is the shortest ack wait accepted.
const minAckWait = 100 * time.Millisecond

// WithConsumer names this consumer in the group (default: the host name
// and a random suffix). Entries a consumer leaves pending are claimed by
// others after the ack wait, whatever its name. Subscriber only.
func WithConsumer(name string) delivery.Option {
	return func(s *options.Set) error {
		if name == "" {
			return fmt.Errorf("%w: empty consumer name", delivery.ErrInvalidOption)
		}
		s.Put(optConsumer, name)
		return nil
	}
}

// WithAckWait sets how long an entry delivered to a consumer may go
// without an ack or an extension before another consumer of the group
// claims it (watermill-redisstream's MaxIdleTime): at least 100ms, default
// 30s. surely's dedup step extends it while the handler runs (every
// lease/3), so it must exceed that interval, not the longest handler; it
// is also how long a crashed consumer's entries wait. Subscriber only.
func WithAckWait(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutAtLeast(delivery.ErrInvalidOption, optAckWait, "ack wait", d, minAckWait)
	}
}

// WithClaimInterval sets how often the subscriber looks for entries idle
// longer than the ack wait: positive and at most the ack wait, default a
// quarter of it. Subscriber only.
func WithClaimInterval(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutPositive(delivery.ErrInvalidOption, optClaimInterval, "claim interval", d)
	}
}

// WithResendInterval sets the pause before a nacked message is handed out
// again (watermill-redisstream's NackResendSleep; positive, default
// 100ms); it also paces postponed entries (see the package doc).
// watermill-redisstream resends nacked messages in process, in a tight
// loop without it. Subscriber only.
func WithResendInterval(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutPositive(delivery.ErrInvalidOption, optResendInterval, "resend interval", d)
	}
}

// WithUnmarshaler sets how a Subscriber decodes stream entries (default:
// watermill-redisstream's DefaultMarshallerUnmarshaller). Use the
// counterpart of the publisher's marshaler. Its errors and panics mark the
// message undecodable; they never end the subscription. Subscriber only.
func WithUnmarshaler(u wmredis.Unmarshaller) delivery.Option {
	return func(s *options.Set) error {
		if u == nil {
			return fmt.Errorf("%w: nil unmarshaler", delivery.ErrInvalidOption)
		}
		s.Put(optUnmarshaler, u)
		return nil
	}
}

// WithMarshaler sets how a Publisher converts Watermill messages to
// stream entries (default: watermill-redisstream's
// DefaultMarshallerUnmarshaller: UUID, payload and msgpack metadata
// fields). Use the counterpart of the subscribers' unmarshaler. Publisher
// only.
func WithMarshaler(m wmredis.Marshaller) delivery.Option {
	return func(s *options.Set) error {
		if m == nil {
			return fmt.Errorf("%w: nil marshaler", delivery.ErrInvalidOption)
		}
		s.Put(optMarshaler, m)
		return nil
	}
}

// subscriberConfig is what a Subscriber's options set.
type subscriberConfig struct {
	group           string
	consumer        string
	maxIdleTime     time.Duration // WithAckWait
	claimInterval   time.Duration
	nackResendSleep time.Duration // WithResendInterval
	unmarshaler     wmredis.Unmarshaller
	logger          *slog.Logger
	closeTimeout    time.Duration
}

func newSubscriberConfig(group string, opts []delivery.Option) (subscriberConfig, error) {
	if group == "" {
		return subscriberConfig{}, fmt.Errorf("%w: empty group", delivery.ErrInvalidOption)
	}
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return subscriberConfig{}, err
	}
	if err := s.Check(delivery.ErrInvalidOption, "redisstream.NewSubscriber", options.Logger, options.CloseTimeout,
		optConsumer, optAckWait, optClaimInterval, optResendInterval, optUnmarshaler); err != nil {
		return subscriberConfig{}, err
	}
	c := subscriberConfig{
		group:           group,
		consumer:        options.Get(s, optConsumer, ""),
		maxIdleTime:     options.Get(s, optAckWait, 30*time.Second),
		nackResendSleep: options.Get(s, optResendInterval, 100*time.Millisecond),
		unmarshaler:     options.Get[wmredis.Unmarshaller](s, optUnmarshaler, wmredis.DefaultMarshallerUnmarshaller{}),
		logger:          options.Get(s, options.Logger, options.Warnings()),
		closeTimeout:    options.Get(s, options.CloseTimeout, delivery.DefaultCloseTimeout),
	}
	c.claimInterval = options.Get(s, optClaimInterval, c.maxIdleTime/4)
	if c.claimInterval > c.maxIdleTime {
		return c, fmt.Errorf("%w: claim interval %v is longer than the ack wait %v",
			delivery.ErrInvalidOption, c.claimInterval, c.maxIdleTime)
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
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return publisherConfig{}, err
	}
	if err := s.Check(delivery.ErrInvalidOption, "redisstream.NewPublisher", options.Logger, optMarshaler); err != nil {
		return publisherConfig{}, err
	}
	return publisherConfig{
		marshaler: options.Get[wmredis.Marshaller](s, optMarshaler, wmredis.DefaultMarshallerUnmarshaller{}),
		logger:    options.Get(s, options.Logger, options.Warnings()),
	}, nil
}
