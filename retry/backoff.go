package retry

import (
	"math"
	"math/rand/v2"
	"time"
)

// defaultMultiplier is the growth factor of a backoff whose Multiplier is 0.
const defaultMultiplier = 2.0

// maxDuration is the largest time.Duration.
const maxDuration = time.Duration(math.MaxInt64)

// backoff is exponential backoff with equal jitter (AWS Architecture Blog,
// "Exponential Backoff And Jitter"): the delay after the n-th failed attempt
// (n starts at 1) is drawn uniformly from [cap(n)/2, cap(n)] where
//
//	cap(n) = min(Max, Initial * Multiplier^(n-1))
//
// The jitter spreads the retries of many consumers that failed together (a
// dependency came back) instead of sending them back in lockstep; the floor
// of half the cap keeps every retry from coming at once (full jitter, a
// draw from [0, cap(n)], can retry after no delay at all) and keeps the
// delay growing with n.
//
// A backoff is a plain value with no validation ([WithBackoff] checks):
// an Initial <= 0 gives no delay, a Max <= 0 means no cap (other than the
// largest Duration), a Multiplier of 0 means defaultMultiplier, and a
// Multiplier below 1 (or NaN) means 1, a constant cap.
//
// Its fields and methods are exported for the package's tests, which name
// it retry.Backoff (export_test.go).
type backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
}

// Cap returns cap(n), the upper bound of Delay(n). n < 1 is read as 1.
// It never overflows: for huge n it returns Max.
func (b backoff) Cap(n int) time.Duration {
	if b.Initial <= 0 {
		return 0
	}
	limit := b.Max
	if limit <= 0 {
		limit = maxDuration
	}
	if n < 1 {
		n = 1
	}
	m := b.Multiplier
	switch {
	case m == 0:
		m = defaultMultiplier
	case !(m >= 1): // below 1 or NaN
		m = 1
	}
	// float64 arithmetic saturates at +Inf instead of wrapping around.
	c := float64(b.Initial) * math.Pow(m, float64(n-1))
	if math.IsInf(c, 0) || math.IsNaN(c) || c >= float64(limit) {
		return limit
	}
	return time.Duration(c)
}

// Delay returns the wait after the n-th failed attempt: a uniform draw from
// [Cap(n)/2, Cap(n)]. rnd returns a float in [0, 1) (a value outside is
// clamped); nil means math/rand/v2's Float64.
func (b backoff) Delay(n int, rnd func() float64) time.Duration {
	c := b.Cap(n)
	if c <= 0 {
		return 0
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	floor := c - c/2 // the upper half: never 0 for c > 0
	r := rnd()
	if !(r > 0) { // negative, zero or NaN
		return floor
	}
	x := float64(floor) + r*float64(c-floor)
	if x >= float64(c) {
		return c
	}
	return time.Duration(x)
}
