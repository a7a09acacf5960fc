package retry

import (
	"errors"
	"fmt"
	"time"

	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/options"
)

// ErrInvalidOption wraps every option error of this package, from both
// [NewPolicy] and [NewBreaker]. Test for it with errors.Is.
var ErrInvalidOption = errors.New("retry: invalid option")

// Policy defaults, each documented at its option.
const (
	defaultMaxAttempts       = defaults.MaxAttempts
	defaultInProcessAttempts = 3
	defaultBackoffInitial    = 100 * time.Millisecond
	defaultBackoffMax        = 10 * time.Second
	defaultMaxInProcessTime  = defaults.MaxInProcessTime
)

// Policy is the retry policy of one handler: the durable attempt budget, the
// in-process attempts of one delivery, and the backoff between them. A Policy
// is immutable once built and safe for concurrent use.
type Policy struct {
	maxAttempts       int
	inProcessAttempts int
	backoff           backoff
	maxInProcessTime  time.Duration
	rnd               func() float64
}

// Option configures a [Policy] (through [NewPolicy]) or a [Breaker]
// (through [NewBreaker]): the two constructors take this one type, and each
// option says which one takes it. An Option that rejects its value returns
// an error wrapping [ErrInvalidOption], and so does a constructor given an
// option it does not take (an option that does not apply is a
// configuration error, never silently ignored). Only the With functions of
// this package make one.
type Option interface{ option }

// option hides an Option's methods: only the With functions of surely's
// packages make one.
type option = options.Option[options.Retry]

// Names of the options.
const (
	optMaxAttempts       = "WithMaxAttempts"
	optInProcessAttempts = "WithInProcessAttempts"
	optBackoff           = "WithBackoff"
	optMaxInProcessTime  = "WithMaxInProcessTime"
	optRand              = "WithRand"
	optWindow            = "WithWindow"
	optMinSamples        = "WithMinSamples"
	optThreshold         = "WithThreshold"
	optCooldown          = "WithCooldown"
)

// bounds is the value of WithBackoff and WithCooldown.
type bounds struct{ initial, max time.Duration }

// NewPolicy returns a Policy with the defaults (5 attempts in all, 3 per
// delivery, backoff from 100ms to 10s doubling, 10s of in-process retrying
// per delivery), changed by opts. It takes [WithMaxAttempts],
// [WithInProcessAttempts], [WithBackoff], [WithMaxInProcessTime] and
// [WithRand]. Every error wraps [ErrInvalidOption].
func NewPolicy(opts ...Option) (*Policy, error) {
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "retry.NewPolicy",
		optMaxAttempts, optInProcessAttempts, optBackoff, optMaxInProcessTime, optRand); err != nil {
		return nil, err
	}
	bo := options.Get(set, optBackoff, bounds{defaultBackoffInitial, defaultBackoffMax})
	p := &Policy{
		maxAttempts:       options.Get(set, optMaxAttempts, defaultMaxAttempts),
		inProcessAttempts: options.Get(set, optInProcessAttempts, defaultInProcessAttempts),
		backoff: backoff{
			Initial:    bo.initial,
			Max:        bo.max,
			Multiplier: defaultMultiplier,
		},
		maxInProcessTime: options.Get(set, optMaxInProcessTime, defaultMaxInProcessTime),
		rnd:              options.Get[func() float64](set, optRand, nil),
	}
	return p, nil
}

// WithMaxAttempts sets the durable attempt budget of one message: attempts
// counted across deliveries, consumers and crashes (the dedup store counts
// them). When it is spent the message is dead-lettered. Default 5; n >= 1.
// Taken by [NewPolicy].
func WithMaxAttempts(n int) Option { return atLeastOne(optMaxAttempts, n) }

// WithInProcessAttempts sets how many attempts one delivery makes, with
// backoff in between, before it gives the message back to the broker (nack)
// for a later redelivery. Default 3; n >= 1 (1: no in-process retry).
// Taken by [NewPolicy].
//
// It is an upper bound: a delivery also stops when the durable budget
// ([WithMaxAttempts]) or the in-process time ([WithMaxInProcessTime]) runs
// out, so it may exceed MaxAttempts without harm.
func WithInProcessAttempts(n int) Option { return atLeastOne(optInProcessAttempts, n) }

// atLeastOne is the option name (its own name, "WithWindow") of a count n,
// which must be at least 1.
func atLeastOne(name string, n int) Option {
	return options.Func[options.Retry](func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: %s(%d): must be >= 1", ErrInvalidOption, name, n)
		}
		s.Put(name, n)
		return nil
	})
}

// WithBackoff sets the bounds of the exponential backoff (multiplier 2, equal
// jitter: after the n-th failed attempt the wait is drawn from [c/2, c],
// c = min(max, initial × 2^(n-1))). Default 100ms and 10s. It needs
// 0 <= initial <= max; initial 0 retries without waiting. Taken by
// [NewPolicy].
func WithBackoff(initial, maxDelay time.Duration) Option {
	return options.Func[options.Retry](func(s *options.Set) error {
		if initial < 0 || maxDelay < initial {
			return fmt.Errorf("%w: WithBackoff(%v, %v): need 0 <= initial <= max", ErrInvalidOption, initial, maxDelay)
		}
		s.Put(optBackoff, bounds{initial, maxDelay})
		return nil
	})
}

// WithMaxInProcessTime bounds the total time one delivery spends in
// in-process retries, attempts and backoff sleeps included. When the next
// backoff would cross it, the delivery nacks instead of sleeping, so a
// message does not hold its broker lease (ack deadline, visibility timeout)
// for long. Default 10s; d > 0. Taken by [NewPolicy].
func WithMaxInProcessTime(d time.Duration) Option {
	return options.Func[options.Retry](func(s *options.Set) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithMaxInProcessTime(%v): must be > 0", ErrInvalidOption, d)
		}
		s.Put(optMaxInProcessTime, d)
		return nil
	})
}

// WithRand replaces the jitter source, for deterministic tests. rnd must
// return a float in [0, 1) and be safe for concurrent use; it must not be
// nil. Default: math/rand/v2's Float64. Taken by [NewPolicy].
func WithRand(rnd func() float64) Option {
	return options.Func[options.Retry](func(s *options.Set) error {
		if rnd == nil {
			return fmt.Errorf("%w: WithRand(nil)", ErrInvalidOption)
		}
		s.Put(optRand, rnd)
		return nil
	})
}

// MaxAttempts returns the durable attempt budget of one message.
func (p *Policy) MaxAttempts() int { return p.maxAttempts }

// InProcessAttempts returns the maximum number of attempts in one delivery.
func (p *Policy) InProcessAttempts() int { return p.inProcessAttempts }

// MaxInProcessTime returns the time budget of in-process retries in one delivery.
func (p *Policy) MaxInProcessTime() time.Duration { return p.maxInProcessTime }

// Delay returns the wait before attempt n+1, after attempt n (n >= 1)
// failed with err: a draw of the policy's backoff for n (see
// [WithBackoff]), or the delay
// asked for with [After] when err carries a longer one. n is the message's
// durable attempt number (the retry middleware passes the dedup store's
// count when it has one), so the wait grows across redeliveries.
//
// An [After] delay is a minimum ("not before d"), never a reason to retry
// sooner than the backoff: After(d) with d <= 0, or a d shorter than the
// draw, waits the backoff, so a handler that returns After(0) every time
// does not redeliver in a tight loop.
//
// Delay does not cap a Retry-After delay: the caller compares it with what
// is left of [Policy.MaxInProcessTime] and nacks with that delay instead of
// sleeping when it does not fit.
func (p *Policy) Delay(n int, err error) time.Duration {
	b := p.backoff.Delay(n, p.rnd)
	if d, ok := AfterDelay(err); ok {
		return max(d, b)
	}
	return b
}
