package handler_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/retry"
)

// newFor calls handler.New and turns a panic into an error, so that one
// bad case fails its own subtest instead of the whole table.
func newFor(fn message.HandlerFunc, opts ...handler.Option) (h message.HandlerFunc, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler.New panicked: %v", r)
		}
	}()
	return handler.New(fn, opts...)
}

// TestEveryConfigurationErrorWrapsErrInvalidOption: each option's invalid
// values, and each invalid combination, fail New with an error wrapping
// handler.ErrInvalidOption, whichever layer would have noticed them.
func TestEveryConfigurationErrorWrapsErrInvalidOption(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	pub := faults.NewPublisher(0)
	ex, err := idempotency.NewExtractor()
	require.NoError(t, err)
	noop := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	required := []handler.Option{handler.WithStore(mem, "orders"), handler.WithDeadLetter(pub, "dead")}
	with := func(opts ...handler.Option) []handler.Option {
		return append(append([]handler.Option{}, required...), opts...)
	}

	h, err := newFor(noop, required...)
	require.NoError(t, err, "the required options alone are valid")
	require.NotNil(t, h)

	cases := []struct {
		name string
		fn   message.HandlerFunc
		opts []handler.Option
	}{
		{"nil handler", nil, required},
		{"nil option", noop, with(nil)},
		{"no store", noop, []handler.Option{handler.WithDeadLetter(pub, "dead")}},
		{"no dead letter", noop, []handler.Option{handler.WithStore(mem, "orders")}},
		{"WithStore nil store", noop, []handler.Option{handler.WithStore(nil, "orders"), handler.WithDeadLetter(pub, "dead")}},
		{"WithStore empty namespace", noop, []handler.Option{handler.WithStore(mem, ""), handler.WithDeadLetter(pub, "dead")}},
		{"WithStore bad namespace", noop, []handler.Option{handler.WithStore(mem, "orders:v1"), handler.WithDeadLetter(pub, "dead")}},
		{"WithStore reserved namespace", noop, []handler.Option{handler.WithStore(mem, idem.KeylessNamespace), handler.WithDeadLetter(pub, "dead")}},
		{"WithDeadLetter nil publisher", noop, []handler.Option{handler.WithStore(mem, "orders"), handler.WithDeadLetter(nil, "dead")}},
		{"WithDeadLetter empty topic", noop, []handler.Option{handler.WithStore(mem, "orders"), handler.WithDeadLetter(pub, "")}},
		{"WithPolicy nil", noop, with(handler.WithPolicy(nil))},
		{"WithLease zero", noop, with(handler.WithLease(0))},
		{"WithLease negative", noop, with(handler.WithLease(-time.Second))},
		{"WithLease under the minimum", noop, with(handler.WithLease(5*time.Millisecond),
			handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(time.Millisecond))))},
		{"WithIdentity nil extractor", noop, with(handler.WithIdentity(nil, handler.RejectMissingKey))},
		{"WithIdentity unknown policy", noop, with(handler.WithIdentity(ex, handler.MissingKeyPolicy(7)))},
		{"WithLogger nil", noop, with(handler.WithLogger(nil))},
		{"WithOnOutcome nil", noop, with(handler.WithOnOutcome(nil))},
		{"WithRedactor nil", noop, with(handler.WithRedactor(nil))},
		{"WithStoreTimeout zero", noop, with(handler.WithStoreTimeout(0))},
		{"WithStoreTimeout negative", noop, with(handler.WithStoreTimeout(-time.Second))},
		{"WithStoreTimeout the default lease", noop, with(handler.WithStoreTimeout(defaults.Lease))},
		{"WithStoreTimeout past the lease", noop, with(handler.WithLease(time.Second), handler.WithStoreTimeout(2*time.Second))},
		{"WithTracerProvider nil", noop, with(handler.WithTracerProvider(nil))},
		{"WithMeterProvider nil", noop, with(handler.WithMeterProvider(nil))},
		{"WithPropagator nil", noop, with(handler.WithPropagator(nil))},
		{"WithMessagingSystem empty", noop, with(handler.WithMessagingSystem(""))},
		{"WithPropagator without a tracer", noop, with(handler.WithPropagator(propagation.TraceContext{}))},
		{"WithMessagingSystem without a tracer", noop, with(handler.WithMessagingSystem("nats"))},
		{"policy in-process time past the lease", noop, with(handler.WithLease(time.Second),
			handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(2*time.Second))))},
		{"WithMaxAttempts zero", noop, with(handler.WithMaxAttempts(0))},
		{"WithInProcessAttempts zero", noop, with(handler.WithInProcessAttempts(0))},
		{"WithBackoff negative initial", noop, with(handler.WithBackoff(-time.Millisecond, time.Second))},
		{"WithBackoff max under initial", noop, with(handler.WithBackoff(time.Second, time.Millisecond))},
		{"WithMaxInProcessTime zero", noop, with(handler.WithMaxInProcessTime(0))},
		{"WithMaxInProcessTime negative", noop, with(handler.WithMaxInProcessTime(-time.Second))},
		{"WithMaxInProcessTime equal to the lease", noop, with(handler.WithLease(time.Second), handler.WithMaxInProcessTime(time.Second))},
		{"WithMaxInProcessTime past the lease", noop, with(handler.WithMaxInProcessTime(time.Minute), handler.WithLease(time.Second))},
		{"WithPolicy with WithMaxAttempts", noop, with(handler.WithPolicy(mustPolicy(t)), handler.WithMaxAttempts(3))},
		{"WithPolicy with WithMaxInProcessTime", noop, with(handler.WithMaxInProcessTime(time.Second), handler.WithPolicy(mustPolicy(t)))},
		{"WithStoreTimeout past a derived lease", noop, with(handler.WithMaxInProcessTime(20*time.Second), handler.WithStoreTimeout(time.Minute))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := newFor(tc.fn, tc.opts...)
			require.ErrorIs(t, err, handler.ErrInvalidOption)
			require.Nil(t, h)
		})
	}
}

// TestLeaseAloneBoundsTheInProcessTime: a lease set alone (3s) lowers the
// in-process retry time to a third of it (1s) instead of failing against
// the default 10s, and the delivery nacks after about 1s of retrying.
func TestLeaseAloneBoundsTheInProcessTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		lease        time.Duration
		minN, maxN   int // attempts, backoff 50..100ms each
		wantDeadline time.Duration
	}{
		{"short lease", 3 * time.Second, 10, 21, time.Second},
		{"default lease", 0, 100, 201, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				var attempts int
				var last time.Time
				start := time.Now()
				opts := []handler.Option{
					handler.WithStore(e.store, "orders"), handler.WithDeadLetter(e.dead, deadTopic), handler.WithBreaker(nil),
					handler.WithMaxAttempts(1000), handler.WithInProcessAttempts(1000), handler.WithBackoff(100*time.Millisecond, 100*time.Millisecond),
				}
				if tc.lease > 0 {
					opts = append(opts, handler.WithLease(tc.lease))
				}
				h, err := handler.New(func(*message.Message) ([]*message.Message, error) {
					attempts++
					last = time.Now()
					return nil, errors.New("timeout")
				}, opts...)
				require.NoError(t, err)
				_, err = h(delivery("order-1", "pay 10"))
				require.ErrorContains(t, err, "timeout")
				require.GreaterOrEqual(t, attempts, tc.minN)
				require.LessOrEqual(t, attempts, tc.maxN)
				require.LessOrEqual(t, last.Sub(start), tc.wantDeadline, "no attempt starts past the in-process time")
			})
		})
	}
}

// TestInProcessTimeAloneLengthensTheLease: an in-process time set alone
// (1 min, past the default 30s lease) makes the lease 3 min instead of
// failing, so a 50s handler holds its claim without an extension, where
// the default 30s lease is extended every 10s.
func TestInProcessTimeAloneLengthensTheLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opt     func(t *testing.T) handler.Option
		extends func(t *testing.T, n int)
	}{
		{"WithMaxInProcessTime", func(*testing.T) handler.Option { return handler.WithMaxInProcessTime(time.Minute) },
			func(t *testing.T, n int) { require.Zero(t, n, "a 3 min lease needs no extension in 50s") }},
		{"WithPolicy", func(t *testing.T) handler.Option {
			return handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(time.Minute)))
		}, func(t *testing.T, n int) { require.Zero(t, n, "a 3 min lease needs no extension in 50s") }},
		{"neither (default lease)", func(*testing.T) handler.Option { return handler.WithConsumerGroup("g") },
			func(t *testing.T, n int) { require.GreaterOrEqual(t, n, 4, "a 30s lease is extended every 10s") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				h, err := handler.New(func(*message.Message) ([]*message.Message, error) {
					time.Sleep(50 * time.Second)
					return nil, nil
				}, handler.WithStore(e.store, "orders"), handler.WithDeadLetter(e.dead, deadTopic), tc.opt(t))
				require.NoError(t, err)
				_, err = h(delivery("order-1", "pay 10"))
				require.NoError(t, err)
				tc.extends(t, e.store.Calls("Extend"))
				rec, err := e.mem.Get(t.Context(), "orders", "order-1")
				require.NoError(t, err)
				require.Equal(t, idempotency.StateDone, rec.State)
			})
		})
	}
}

// TestLeaseAndInProcessTimeBothSet: with both set, a consistent pair is
// kept as given; an inconsistent one is an error (cases in
// TestEveryConfigurationErrorWrapsErrInvalidOption).
func TestLeaseAndInProcessTimeBothSet(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var attempts int
		h, err := handler.New(func(*message.Message) ([]*message.Message, error) {
			attempts++
			return nil, errors.New("timeout")
		}, handler.WithStore(e.store, "orders"), handler.WithDeadLetter(e.dead, deadTopic), handler.WithBreaker(nil),
			handler.WithLease(time.Second), handler.WithMaxInProcessTime(999*time.Millisecond),
			handler.WithMaxAttempts(1000), handler.WithInProcessAttempts(1000), handler.WithBackoff(100*time.Millisecond, 100*time.Millisecond))
		require.NoError(t, err)
		_, err = h(delivery("order-1", "pay 10"))
		require.ErrorContains(t, err, "timeout")
		require.GreaterOrEqual(t, attempts, 10)
		require.LessOrEqual(t, attempts, 21)
		_, err = handler.New(func(*message.Message) ([]*message.Message, error) { return nil, nil },
			handler.WithStore(e.store, "orders"), handler.WithDeadLetter(e.dead, deadTopic),
			handler.WithLease(time.Second), handler.WithMaxInProcessTime(time.Second))
		require.ErrorIs(t, err, handler.ErrInvalidOption)
		require.ErrorContains(t, err, "must be shorter than the lease")
	})
}
