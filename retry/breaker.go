package retry

import (
	"fmt"
	"sync"
	"time"

	"github.com/surely-dev/surely/internal/options"
)

// Breaker defaults (each documented at its option) and the bounds of a
// denied [Permit]'s Wait.
const (
	defaultWindow          = 20
	defaultMinSamples      = 10
	defaultThreshold       = 0.8
	defaultCooldownInitial = 5 * time.Second
	defaultCooldownMax     = time.Minute
	// minWait is the shortest Wait of a denied Permit, so that a consumer
	// nacking with it does not spin.
	minWait = 100 * time.Millisecond
	// maxRecheck bounds the Wait of a caller denied while a probe is in flight.
	maxRecheck = time.Second
)

// BreakerState is the state of a [Breaker].
type BreakerState int

const (
	// BreakerClosed means normal operation; every attempt is allowed and its
	// signal recorded.
	BreakerClosed BreakerState = iota
	// BreakerOpen means a dependency looks down; no attempt is allowed until the
	// cooldown has passed.
	BreakerOpen
	// BreakerHalfOpen means the cooldown has passed; one probe at a time is
	// allowed, the others wait.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	return enumString("BreakerState", int(s), "closed", "open", "half-open")
}

// Signal is what one attempt tells a [Breaker] about the dependency.
type Signal int

const (
	// SignalSuccess means the attempt succeeded.
	SignalSuccess Signal = iota
	// SignalTransient means the attempt failed with a transient error, the sign
	// of an outage the breaker looks for.
	SignalTransient
	// SignalNeutral means neither. Permanent errors (the message is bad, not the
	// dependency), duplicates, cancellations. Not counted.
	SignalNeutral
)

// String returns "success", "transient" or "neutral".
func (s Signal) String() string {
	return enumString("Signal", int(s), "success", "transient", "neutral")
}

// enumString is the name of value v of the enumeration typ, whose values
// 0, 1, ... are named names; another value prints as typ(v).
func enumString(typ string, v int, names ...string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// SignalOf maps a [Class] to the [Signal] a Breaker records: transient is
// transient, permanent and canceled are neutral.
func SignalOf(c Class) Signal {
	if c == ClassTransient {
		return SignalTransient
	}
	return SignalNeutral
}

// Permit is the answer of [Breaker.Allow].
type Permit struct {
	// Allowed: the caller may make the attempt, and must then pass this
	// Permit to [Breaker.Record] with the attempt's signal.
	Allowed bool
	// Probe: the attempt is the single probe of a half-open breaker; its
	// signal decides whether the breaker closes or opens again.
	Probe bool
	// Wait is set when the attempt is not allowed: how long the caller
	// should wait (typically: nack the message with this delay) before
	// asking again. It is the remaining cooldown when the breaker is open, a
	// short re-check interval when a probe is in flight, and never less
	// than 100ms.
	Wait time.Duration

	// ticket ties the permit to the breaker period that issued it, so that
	// late signals are not mixed into a later one.
	ticket uint64
}

// Breaker is an outage breaker. While most recent attempts fail transiently
// (a database or downstream API is down), retrying every message only burns
// their attempt budgets and floods the dead letter. The breaker then opens:
// callers are denied and should nack with [Permit.Wait] without running the
// handler and without spending an attempt. After a cooldown it lets one
// probe through at a time; a successful probe closes it, a transient failure
// opens it again with a doubled cooldown (up to a maximum).
//
// This is NServiceBus's "automatic rate limiting" and MassTransit's "kill
// switch", applied to one consumer process; each process decides alone.
//
// A nil *Breaker is valid and always closed: it allows everything and
// records nothing. A Breaker is safe for concurrent use.
type Breaker struct {
	window          int
	minSamples      int
	minSamplesSet   bool
	threshold       float64
	cooldownInitial time.Duration
	cooldownMax     time.Duration

	mu    sync.Mutex
	state BreakerState
	// ring of the last counted signals while closed (true: transient).
	ring      []bool
	next      int // index of the next write into ring
	samples   int // filled entries of ring
	transient int // true entries of ring

	seq       uint64 // ticket source; each period and each probe gets a new one
	epoch     uint64 // ticket of the current closed period
	cooldown  time.Duration
	openUntil time.Time

	probing    bool
	probe      uint64    // ticket of the probe in flight
	probeSince time.Time // when it was issued
}

// NewBreaker returns a closed Breaker with the defaults (the last 20
// signals, at least 10 of them, 80% transient failures open it, cooldown
// from 5s doubling up to 1m), changed by opts. It takes [WithWindow],
// [WithMinSamples], [WithThreshold] and [WithCooldown]. Every error wraps
// [ErrInvalidOption].
func NewBreaker(opts ...Option) (*Breaker, error) {
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "retry.NewBreaker", optWindow, optMinSamples, optThreshold, optCooldown); err != nil {
		return nil, err
	}
	cooldown := options.Get(set, optCooldown, bounds{defaultCooldownInitial, defaultCooldownMax})
	b := &Breaker{
		window:          options.Get(set, optWindow, defaultWindow),
		minSamples:      options.Get(set, optMinSamples, defaultMinSamples),
		minSamplesSet:   set.Has(optMinSamples),
		threshold:       options.Get(set, optThreshold, defaultThreshold),
		cooldownInitial: cooldown.initial,
		cooldownMax:     cooldown.max,
	}
	if !b.minSamplesSet {
		b.minSamples = min(defaultMinSamples, b.window)
	}
	if b.minSamples > b.window {
		return nil, fmt.Errorf("%w: WithMinSamples(%d) exceeds the window (%d)", ErrInvalidOption, b.minSamples, b.window)
	}
	b.ring = make([]bool, b.window)
	b.cooldown = b.cooldownInitial
	return b, nil
}

// WithWindow sets how many recent signals (successes and transient
// failures) the breaker remembers while closed. Default 20; n >= 1. Taken
// by [NewBreaker].
func WithWindow(n int) Option { return atLeastOne(optWindow, n) }

// WithMinSamples sets how many signals the window must hold before the
// breaker may open, so that two failures out of two do not stop a consumer.
// Default 10, or the window if it is smaller; 1 <= n <= window. Taken by
// [NewBreaker].
func WithMinSamples(n int) Option { return atLeastOne(optMinSamples, n) }

// WithThreshold sets the ratio of transient failures in the window that
// opens the breaker. Default 0.8; 0 < ratio <= 1. Taken by [NewBreaker].
func WithThreshold(ratio float64) Option {
	return options.Func[options.Retry](func(s *options.Set) error {
		if !(ratio > 0 && ratio <= 1) { // also rejects NaN
			return fmt.Errorf("%w: WithThreshold(%v): must be in (0, 1]", ErrInvalidOption, ratio)
		}
		s.Put(optThreshold, ratio)
		return nil
	})
}

// WithCooldown sets how long the breaker stays open before it lets a probe
// through: initial the first time, doubled after each failed probe up to
// max, back to initial when the breaker closes. Default 5s and 1m;
// 0 < initial <= max. Taken by [NewBreaker].
//
// A probe that is never recorded (a caller that lost its Permit) is given up
// after max, so that a lost probe cannot keep the breaker half-open forever.
func WithCooldown(initial, maxCooldown time.Duration) Option {
	return options.Func[options.Retry](func(s *options.Set) error {
		if initial <= 0 || maxCooldown < initial {
			return fmt.Errorf("%w: WithCooldown(%v, %v): need 0 < initial <= max", ErrInvalidOption, initial, maxCooldown)
		}
		s.Put(optCooldown, bounds{initial, maxCooldown})
		return nil
	})
}

// State returns the current state. An open breaker whose cooldown has passed
// reports [BreakerHalfOpen].
func (b *Breaker) State() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	return b.state
}

// Allow asks whether an attempt may run now. Closed: always. Open: no, wait
// for the rest of the cooldown. Half-open: yes as the probe if no probe is in
// flight, otherwise no, re-check shortly.
//
// Every allowed Permit must be passed to [Breaker.Record] once the attempt
// is over, whatever its outcome ([SignalNeutral] if nothing can be said).
func (b *Breaker) Allow() Permit {
	if b == nil {
		return Permit{Allowed: true}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.advance(now)
	switch b.state {
	case BreakerOpen:
		return Permit{Wait: max(b.openUntil.Sub(now), minWait)}
	case BreakerHalfOpen:
		if b.probing && now.Sub(b.probeSince) < b.cooldownMax {
			return Permit{Wait: max(min(b.cooldown, maxRecheck), minWait)}
		}
		// No probe in flight, or the one in flight is lost: issue one.
		b.seq++
		b.probing, b.probe, b.probeSince = true, b.seq, now
		return Permit{Allowed: true, Probe: true, ticket: b.probe}
	default:
		return Permit{Allowed: true, ticket: b.epoch}
	}
}

// Record reports the signal of an attempt made with p.
//
// Closed: a success or a transient failure enters the window; when it holds
// at least MinSamples signals and the transient ratio reaches the
// threshold, the breaker opens. Half-open, for the probe: a success closes
// the breaker (empty window, initial cooldown); a transient failure opens it
// again with the cooldown doubled (up to its max); a neutral signal frees
// the probe slot and the breaker stays half-open.
//
// Signals of non-probe permits issued before the breaker opened are ignored,
// as are denied permits, permits from an earlier closed period, and a probe
// that was given up. Neutral signals never count.
func (b *Breaker) Record(p Permit, s Signal) {
	if b == nil || !p.Allowed {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.advance(now)
	if p.Probe {
		b.recordProbe(p, s, now)
		return
	}
	if b.state != BreakerClosed || p.ticket != b.epoch {
		return // admitted in an earlier period
	}
	switch s {
	case SignalSuccess:
		b.count(false, now)
	case SignalTransient:
		b.count(true, now)
	}
}

// recordProbe records the signal of the probe p: a success closes the
// breaker, a transient failure opens it again with the cooldown doubled,
// a neutral signal only frees the probe slot.
func (b *Breaker) recordProbe(p Permit, s Signal, now time.Time) {
	if b.state != BreakerHalfOpen || !b.probing || p.ticket != b.probe {
		return // stale probe
	}
	b.probing = false
	switch s {
	case SignalSuccess:
		b.close()
	case SignalTransient:
		b.cooldown = doubled(b.cooldown, b.cooldownMax)
		b.open(now)
	}
}

// count enters a signal of the closed period into the window (true: a
// transient failure) and opens the breaker when the window holds enough
// signals and the transient ratio reaches the threshold.
func (b *Breaker) count(transient bool, now time.Time) {
	if b.samples == b.window {
		if b.ring[b.next] {
			b.transient--
		}
	} else {
		b.samples++
	}
	b.ring[b.next] = transient
	if transient {
		b.transient++
	}
	b.next = (b.next + 1) % b.window

	if b.samples >= b.minSamples && float64(b.transient)/float64(b.samples) >= b.threshold {
		b.open(now)
	}
}

// advance moves an open breaker whose cooldown has passed to half-open.
func (b *Breaker) advance(now time.Time) {
	if b.state == BreakerOpen && !now.Before(b.openUntil) {
		b.state = BreakerHalfOpen
		b.probing = false
	}
}

// open starts a cooldown of the current length; it ends the closed period.
func (b *Breaker) open(now time.Time) {
	b.state = BreakerOpen
	b.openUntil = now.Add(b.cooldown)
	b.probing = false
	b.seq++
	b.epoch = b.seq // permits of the closed period that just ended are stale
}

// close starts a new closed period with an empty window and the initial cooldown.
func (b *Breaker) close() {
	b.state = BreakerClosed
	b.cooldown = b.cooldownInitial
	clear(b.ring)
	b.next, b.samples, b.transient = 0, 0, 0
	b.seq++
	b.epoch = b.seq
}

func doubled(d, limit time.Duration) time.Duration {
	if d > limit/2 {
		return limit
	}
	return 2 * d
}
