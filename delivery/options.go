package delivery

import (
	"errors"
	"log/slog"
	"time"

	"github.com/surely-dev/surely/internal/options"
)

// ErrInvalidOption is wrapped by every configuration error of an adapter's
// constructors.
var ErrInvalidOption = errors.New("delivery: invalid option")

// ErrClosed is returned by an adapter's Subscribe or Publish after Close.
var ErrClosed = errors.New("delivery: closed")

// DefaultCloseTimeout is how long an adapter's Close waits, by default, for
// the handlers of messages in flight to ack or nack before it gives up on
// them (the broker redelivers what was not acked).
const DefaultCloseTimeout = 30 * time.Second

// Option configures an adapter's Subscriber or Publisher. Every adapter
// (package adapters/<broker>) takes this one type: the options common to
// all of them are defined here, each adapter's own in its package. A
// constructor given an option it does not use returns an error wrapping
// ErrInvalidOption.
type Option func(*options.Set) error

// WithLogger sets the adapter's logger. By default an adapter logs its
// warnings (messages still in flight at close, a guarantee weaker than
// configured) and errors to slog.Default(), and nothing else.
func WithLogger(l *slog.Logger) Option {
	return func(s *options.Set) error { return s.PutLogger(ErrInvalidOption, l) }
}

// WithCloseTimeout sets how long Close waits for messages in flight
// (default DefaultCloseTimeout).
func WithCloseTimeout(d time.Duration) Option {
	return func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, options.CloseTimeout, "close timeout", d)
	}
}
