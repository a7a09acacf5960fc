package delivery

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/surely-dev/surely/internal/options"
)

// ErrInvalidOption is wrapped by every configuration error of an adapter's
// constructors.
var ErrInvalidOption = errors.New("delivery: invalid option")

// ErrClosed is returned by an adapter's Subscribe or Publish after Close.
var ErrClosed = errors.New("delivery: closed")

// Option configures an adapter's Subscriber or Publisher. Every adapter
// (package adapters/<broker>) takes this one type: the options that mean
// the same in several adapters are defined here, once, each adapter's own
// in its package. A constructor given an option it does not use (a
// Subscriber option given to a Publisher, another adapter's WithMarshaler)
// returns an error wrapping ErrInvalidOption that names the option, as it
// does for a value outside the bounds its adapter accepts. Only the With
// functions of this package and of the adapters make one.
type Option interface{ option }

// option hides an Option's methods: only the With functions of surely's
// packages make one.
type option = options.Option[options.Delivery]

// WithLogger sets the adapter's logger. By default an adapter logs its
// warnings (messages still in flight at close, a guarantee weaker than
// configured) and errors to slog.Default(), and nothing else.
func WithLogger(l *slog.Logger) Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return s.PutLogger(ErrInvalidOption, l) })
}

// WithCloseTimeout sets how long a Subscriber's Close waits for the
// handlers of messages in flight to ack or nack before it gives up on them
// (their contexts are cancelled, the broker redelivers what was not
// acked): positive, default 30s. Subscriber only; GoChannel has none.
func WithCloseTimeout(d time.Duration) Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, options.CloseTimeout, "close timeout", d)
	})
}

// WithConcurrency sets how many messages of one topic a Subscriber has in
// flight at once: positive, default 1. Subscriber only, taken by amqp
// (also the consumer's prefetch, at most 65535), nats (also the
// consumer's MaxAckPending and the most one pull fetches) and sqs (the
// receiving workers, each one message at a time).
func WithConcurrency(n int) Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: WithConcurrency(%d): not positive", ErrInvalidOption, n)
		}
		s.Put(options.Concurrency, n)
		return nil
	})
}

// WithAckWait sets how long the broker leaves a delivered message without
// an ack before it hands it out again: NATS's AckWait, Redis Streams' idle
// time before another consumer of the group claims the entry, the
// deadline of a PostgreSQL (watermill-sql) delivery, SQS's visibility
// timeout. Default 30s. surely's dedup step extends the delivery while the
// handler runs (every lease/3), so it need exceed only that interval, not
// the longest handler; it is also how long a crashed consumer's messages
// wait. Positive; each adapter that takes it has its bounds: at least
// 100ms on nats, redisstream and sql, whole seconds from 1s to 12h on sqs.
// Subscriber only.
func WithAckWait(d time.Duration) Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, options.AckWait, "WithAckWait", d)
	})
}

// WithResendInterval sets the pause before a nacked message is handed out
// again (default 100ms): watermill-redisstream's NackResendSleep, which
// also paces the postponed entries of adapters/redisstream, and
// watermill-sql's ResendInterval (at least 1ms). surely's chain has
// already waited (its backoff) before it nacks; this keeps a bare handler
// from spinning. Positive. Subscriber only, taken by redisstream and sql.
func WithResendInterval(d time.Duration) Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, options.ResendInterval, "WithResendInterval", d)
	})
}
