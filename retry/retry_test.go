package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var errBase = errors.New("base")

func TestPermanentNil(t *testing.T) {
	t.Parallel()
	require.NoError(t, retry.Permanent(nil))
	require.NoError(t, retry.After(time.Second, nil))
	assert.False(t, retry.IsPermanent(nil))
	_, ok := retry.AfterDelay(nil)
	assert.False(t, ok)
	assert.False(t, retry.IsCanceled(context.Background(), nil))
	assert.Equal(t, retry.ClassTransient, retry.Classify(context.Background(), nil), "nil: the zero Class")
}

func TestClassification(t *testing.T) {
	t.Parallel()

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(0, 0))
	t.Cleanup(cancelExpired)

	tests := []struct {
		name      string
		ctx       context.Context
		err       error
		permanent bool
		after     time.Duration
		hasAfter  bool
		canceled  bool
		class     retry.Class
	}{
		{name: "plain", ctx: live, err: errBase, class: retry.ClassTransient},
		{name: "permanent", ctx: live, err: retry.Permanent(errBase), permanent: true, class: retry.ClassPermanent},
		{
			name: "permanent wrapped with %w", ctx: live,
			err:       fmt.Errorf("decode order: %w", retry.Permanent(errBase)),
			permanent: true, class: retry.ClassPermanent,
		},
		{
			name: "permanent wrapped twice", ctx: live,
			err:       fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", retry.Permanent(errBase))),
			permanent: true, class: retry.ClassPermanent,
		},
		{
			name: "permanent in a join", ctx: live,
			err:       errors.Join(io.EOF, retry.Permanent(errBase)),
			permanent: true, class: retry.ClassPermanent,
		},
		{
			name: "permanent in a wrapped join", ctx: live,
			err:       fmt.Errorf("handler: %w", errors.Join(io.EOF, retry.Permanent(errBase))),
			permanent: true, class: retry.ClassPermanent,
		},
		{
			name: "permanent in a multi-%w", ctx: live,
			err:       fmt.Errorf("a: %w, b: %w", io.EOF, retry.Permanent(errBase)),
			permanent: true, class: retry.ClassPermanent,
		},
		{
			name: "after", ctx: live, err: retry.After(3*time.Second, errBase),
			after: 3 * time.Second, hasAfter: true, class: retry.ClassTransient,
		},
		{
			name: "after wrapped", ctx: live, err: fmt.Errorf("call api: %w", retry.After(time.Minute, errBase)),
			after: time.Minute, hasAfter: true, class: retry.ClassTransient,
		},
		{
			name: "after in a join", ctx: live, err: errors.Join(io.EOF, retry.After(time.Minute, errBase)),
			after: time.Minute, hasAfter: true, class: retry.ClassTransient,
		},
		{
			name: "negative after is zero", ctx: live, err: retry.After(-time.Second, errBase),
			after: 0, hasAfter: true, class: retry.ClassTransient,
		},
		{
			name: "hand-built negative after is zero", ctx: live, err: &retry.AfterError{Delay: -time.Second, Err: errBase},
			after: 0, hasAfter: true, class: retry.ClassTransient,
		},
		{
			name: "permanent wins over after", ctx: live, err: retry.Permanent(retry.After(time.Second, errBase)),
			permanent: true, after: time.Second, hasAfter: true, class: retry.ClassPermanent,
		},
		{
			name: "after wrapping permanent is permanent", ctx: live, err: retry.After(time.Second, retry.Permanent(errBase)),
			permanent: true, after: time.Second, hasAfter: true, class: retry.ClassPermanent,
		},
		{name: "canceled with live ctx is transient", ctx: live, err: context.Canceled, class: retry.ClassTransient},
		{
			name: "attempt timeout with live ctx is transient", ctx: live,
			err: fmt.Errorf("query: %w", context.DeadlineExceeded), class: retry.ClassTransient,
		},
		{name: "canceled with canceled ctx", ctx: canceled, err: context.Canceled, canceled: true, class: retry.ClassCanceled},
		{
			name: "wrapped canceled with canceled ctx", ctx: canceled,
			err: fmt.Errorf("query: %w", context.Canceled), canceled: true, class: retry.ClassCanceled,
		},
		{
			name: "deadline with expired ctx", ctx: expired,
			err: fmt.Errorf("query: %w", context.DeadlineExceeded), canceled: true, class: retry.ClassCanceled,
		},
		{
			name: "canceled in a join", ctx: canceled,
			err: errors.Join(errBase, context.Canceled), canceled: true, class: retry.ClassCanceled,
		},
		{
			name: "canceled beats permanent", ctx: canceled,
			err: retry.Permanent(fmt.Errorf("query: %w: %w", errBase, context.Canceled)), permanent: true, canceled: true,
			class: retry.ClassCanceled,
		},
		{name: "other error with canceled ctx is transient", ctx: canceled, err: errBase, class: retry.ClassTransient},
		{
			name: "permanent with canceled ctx stays permanent", ctx: canceled,
			err: retry.Permanent(errBase), permanent: true, class: retry.ClassPermanent,
		},
		{name: "nil ctx never canceled", ctx: nil, err: context.Canceled, class: retry.ClassTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.permanent, retry.IsPermanent(tt.err), "IsPermanent")
			d, ok := retry.AfterDelay(tt.err)
			assert.Equal(t, tt.hasAfter, ok, "AfterDelay ok")
			assert.Equal(t, tt.after, d, "AfterDelay delay")
			assert.Equal(t, tt.canceled, retry.IsCanceled(tt.ctx, tt.err), "IsCanceled")
			assert.Equal(t, tt.class, retry.Classify(tt.ctx, tt.err), "Classify")
			// The marks never hide the cause.
			if !errors.Is(errBase, tt.err) && (tt.permanent || tt.hasAfter) {
				assert.ErrorIs(t, tt.err, errBase)
			}
		})
	}
}

func TestErrorTypes(t *testing.T) {
	t.Parallel()

	perm := retry.Permanent(errBase)
	var pe *retry.PermanentError
	require.ErrorAs(t, perm, &pe)
	assert.Same(t, errBase, pe.Err)
	assert.Same(t, errBase, pe.Unwrap())
	assert.Equal(t, "base", perm.Error(), "the permanent mark does not change the text")
	assert.Same(t, perm, retry.Permanent(perm), "marking twice does not wrap twice")

	after := retry.After(2*time.Second, errBase)
	var ae *retry.AfterError
	require.ErrorAs(t, after, &ae)
	assert.Equal(t, 2*time.Second, ae.Delay)
	assert.Same(t, errBase, ae.Unwrap())
	assert.Equal(t, "base (retry after 2s)", after.Error())

	wrapped := fmt.Errorf("handle: %w", retry.Permanent(io.ErrUnexpectedEOF))
	assert.ErrorIs(t, wrapped, io.ErrUnexpectedEOF)
	assert.Equal(t, "handle: unexpected EOF", wrapped.Error())
}

func TestClassString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "transient", retry.ClassTransient.String())
	assert.Equal(t, "permanent", retry.ClassPermanent.String())
	assert.Equal(t, "canceled", retry.ClassCanceled.String())
	assert.Equal(t, "Class(7)", retry.Class(7).String())
}

// seq returns a rand function cycling through vs.
func seq(vs ...float64) func() float64 {
	i := 0
	return func() float64 {
		v := vs[i%len(vs)]
		i++
		return v
	}
}

func TestBackoffCap(t *testing.T) {
	t.Parallel()
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
	want := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 10 * time.Second, 10 * time.Second,
	}
	for i, w := range want {
		assert.Equal(t, w, b.Cap(i+1), "cap(%d)", i+1)
	}
	assert.Equal(t, 100*time.Millisecond, b.Cap(0), "n < 1 reads as 1")
	assert.Equal(t, 100*time.Millisecond, b.Cap(-5), "n < 1 reads as 1")
}

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
	for n := 1; n <= 64; n++ {
		c := b.Cap(n)
		for range 200 {
			d := b.Delay(n, nil)
			require.GreaterOrEqual(t, d, time.Duration(0), "delay(%d)", n)
			require.LessOrEqual(t, d, c, "delay(%d)", n)
		}
	}
}

func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	b := retry.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}
	tests := []struct {
		name string
		n    int
		r    float64
		want time.Duration
	}{
		{"zero draw: half the cap", 3, 0, 2 * time.Second},
		{"half draw", 3, 0.5, 3 * time.Second},
		{"quarter draw", 1, 0.25, 625 * time.Millisecond},
		{"largest draw", 3, math.Nextafter(1, 0), 4*time.Second - 1},
		{"draw of 1 clamps", 3, 1, 4 * time.Second},
		{"draw above 1 clamps", 3, 7, 4 * time.Second},
		{"negative draw clamps", 3, -1, 2 * time.Second},
		{"NaN draw clamps", 3, math.NaN(), 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := b.Delay(tt.n, func() float64 { return tt.r })
			assert.InDelta(t, tt.want, got, float64(time.Microsecond))
			assert.LessOrEqual(t, got, b.Cap(tt.n))
		})
	}
}

func TestBackoffNoOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    retry.Backoff
		want time.Duration
	}{
		{"capped", retry.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}, 10 * time.Second},
		{"no max", retry.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2}, time.Duration(math.MaxInt64)},
		{"huge multiplier", retry.Backoff{Initial: time.Second, Max: time.Hour, Multiplier: 1e300}, time.Hour},
		{"infinite multiplier", retry.Backoff{Initial: time.Second, Max: time.Hour, Multiplier: math.Inf(1)}, time.Hour},
		{"huge initial", retry.Backoff{Initial: time.Duration(math.MaxInt64), Multiplier: 2}, time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, n := range []int{1000, 1 << 20, math.MaxInt} {
				c := tt.b.Cap(n)
				assert.Equal(t, tt.want, c, "cap(%d)", n)
				for _, r := range []float64{0, 0.5, math.Nextafter(1, 0)} {
					d := tt.b.Delay(n, func() float64 { return r })
					assert.GreaterOrEqual(t, d, time.Duration(0), "delay(%d) r=%v", n, r)
					assert.LessOrEqual(t, d, c, "delay(%d) r=%v", n, r)
				}
			}
		})
	}
}

func TestBackoffZeroValues(t *testing.T) {
	t.Parallel()
	one := func() float64 { return math.Nextafter(1, 0) }
	assert.Equal(t, time.Duration(0), retry.Backoff{}.Delay(3, one), "zero Backoff: no delay")
	assert.Equal(t, time.Duration(0), retry.Backoff{Initial: -time.Second, Max: time.Second}.Delay(3, one))
	assert.Equal(t, 400*time.Millisecond, retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}.Cap(3),
		"multiplier 0 means 2")
	assert.Equal(t, 100*time.Millisecond, retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 0.5}.Cap(3),
		"multiplier below 1 means 1")
	assert.Equal(t, 100*time.Millisecond, retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: math.NaN()}.Cap(3))
	assert.Equal(t, 225*time.Millisecond, retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 1.5}.Cap(3))
	assert.Equal(t, 50*time.Millisecond, retry.Backoff{Initial: 100 * time.Millisecond, Max: 50 * time.Millisecond}.Cap(1),
		"max below initial caps")
}

func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	p, err := retry.NewPolicy()
	require.NoError(t, err)
	assert.Equal(t, 5, p.MaxAttempts())
	assert.Equal(t, 3, p.InProcessAttempts())
	assert.Equal(t, 10*time.Second, p.MaxInProcessTime())
	assert.Equal(t, retry.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}, p.Backoff())
	for n := 1; n <= 20; n++ {
		d := p.Delay(n, errBase)
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, p.Backoff().Cap(n))
	}
}

func TestPolicyOptions(t *testing.T) {
	t.Parallel()
	p, err := retry.NewPolicy(
		retry.WithMaxAttempts(8),
		retry.WithInProcessAttempts(1),
		retry.WithBackoff(time.Second, 30*time.Second),
		retry.WithMaxInProcessTime(time.Minute),
		retry.WithRand(func() float64 { return 0.5 }),
	)
	require.NoError(t, err)
	assert.Equal(t, 8, p.MaxAttempts())
	assert.Equal(t, 1, p.InProcessAttempts())
	assert.Equal(t, time.Minute, p.MaxInProcessTime())
	assert.Equal(t, 750*time.Millisecond, p.Delay(1, errBase))
	assert.Equal(t, 1500*time.Millisecond, p.Delay(2, errBase))
	assert.Equal(t, 12*time.Second, p.Delay(5, errBase))
	assert.Equal(t, 22500*time.Millisecond, p.Delay(100, errBase))

	zero, err := retry.NewPolicy(retry.WithBackoff(0, 0))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), zero.Delay(3, errBase), "WithBackoff(0, 0): no wait")
}

func TestPolicyDeterministic(t *testing.T) {
	t.Parallel()
	newPolicy := func() *retry.Policy {
		p, err := retry.NewPolicy(retry.WithRand(seq(0.1, 0.9, 0.35, 0.7)))
		require.NoError(t, err)
		return p
	}
	a, b := newPolicy(), newPolicy()
	for n := 1; n <= 10; n++ {
		assert.Equal(t, a.Delay(n, errBase), b.Delay(n, errBase), "n=%d", n)
	}
}

func TestPolicyDelayHonorsAfter(t *testing.T) {
	t.Parallel()
	p, err := retry.NewPolicy(retry.WithRand(func() float64 { return 0.5 }))
	require.NoError(t, err)

	tests := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"backoff", errBase, 150 * time.Millisecond}, // n=2: cap 200ms, from 100ms, half way
		{"after", retry.After(42*time.Second, errBase), 42 * time.Second},
		{"after beyond the backoff max", retry.After(time.Hour, errBase), time.Hour},
		{"after zero: the backoff", retry.After(0, errBase), 150 * time.Millisecond},
		{"after negative: the backoff", retry.After(-time.Second, errBase), 150 * time.Millisecond},
		{"after shorter than the backoff", retry.After(time.Millisecond, errBase), 150 * time.Millisecond},
		{"hand-built negative", &retry.AfterError{Delay: -time.Second, Err: errBase}, 150 * time.Millisecond},
		{"after wrapped", fmt.Errorf("x: %w", retry.After(7*time.Second, errBase)), 7 * time.Second},
		{"after joined", errors.Join(errBase, retry.After(7*time.Second, errBase)), 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, p.Delay(2, tt.err))
		})
	}
}

func TestPolicyInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opt  retry.Option
	}{
		{"max attempts 0", retry.WithMaxAttempts(0)},
		{"max attempts negative", retry.WithMaxAttempts(-1)},
		{"in-process attempts 0", retry.WithInProcessAttempts(0)},
		{"in-process attempts negative", retry.WithInProcessAttempts(-3)},
		{"backoff negative initial", retry.WithBackoff(-time.Millisecond, time.Second)},
		{"backoff max below initial", retry.WithBackoff(time.Second, time.Millisecond)},
		{"backoff negative max", retry.WithBackoff(0, -time.Second)},
		{"in-process time 0", retry.WithMaxInProcessTime(0)},
		{"in-process time negative", retry.WithMaxInProcessTime(-time.Second)},
		{"nil rand", retry.WithRand(nil)},
		{"nil option", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := retry.NewPolicy(retry.WithMaxAttempts(3), tt.opt)
			require.ErrorIs(t, err, retry.ErrInvalidOption)
			assert.Nil(t, p)
		})
	}
}

// Equal jitter: the draw is in [cap/2, cap], so a failed attempt is never
// retried at once, whatever the random source returns.
func TestBackoffEqualJitterFloor(t *testing.T) {
	t.Parallel()
	b := retry.Backoff{Initial: 10 * time.Millisecond, Max: time.Second, Multiplier: 2}
	for n := 1; n <= 10; n++ {
		c := b.Cap(n)
		for _, r := range []float64{0, -1, math.NaN(), 0.5, math.Nextafter(1, 0), 1, 7} {
			d := b.Delay(n, func() float64 { return r })
			require.GreaterOrEqual(t, d, c/2, "delay(%d) r=%v", n, r)
			require.LessOrEqual(t, d, c, "delay(%d) r=%v", n, r)
		}
	}
}

// After(d) with d <= 0 is an ordinary transient error: the backoff's delay,
// not an immediate retry. A positive d shorter than the backoff waits the
// backoff too ("not before d" holds either way).
func TestPolicyDelayAfterNonPositiveBacksOff(t *testing.T) {
	t.Parallel()
	p, err := retry.NewPolicy(retry.WithBackoff(time.Second, time.Minute), retry.WithRand(func() float64 { return 0 }))
	require.NoError(t, err)
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond} {
		for n := 1; n <= 4; n++ {
			assert.Equal(t, p.Backoff().Cap(n)/2, p.Delay(n, retry.After(d, errBase)), "After(%v), n=%d", d, n)
		}
	}
	assert.Equal(t, 42*time.Second, p.Delay(1, retry.After(42*time.Second, errBase)), "a longer After delay is kept whole")
}
