package handler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/middleware"
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
		{"WithStore reserved namespace", noop, []handler.Option{handler.WithStore(mem, middleware.KeylessNamespace), handler.WithDeadLetter(pub, "dead")}},
		{"WithDeadLetter nil publisher", noop, []handler.Option{handler.WithStore(mem, "orders"), handler.WithDeadLetter(nil, "dead")}},
		{"WithDeadLetter empty topic", noop, []handler.Option{handler.WithStore(mem, "orders"), handler.WithDeadLetter(pub, "")}},
		{"WithPolicy nil", noop, with(handler.WithPolicy(nil))},
		{"WithLease zero", noop, with(handler.WithLease(0))},
		{"WithLease negative", noop, with(handler.WithLease(-time.Second))},
		{"WithLease under the minimum", noop, with(handler.WithLease(5*time.Millisecond),
			handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(time.Millisecond))))},
		{"WithIdentity nil extractor", noop, with(handler.WithIdentity(nil, middleware.RejectMissingKey))},
		{"WithIdentity unknown policy", noop, with(handler.WithIdentity(ex, middleware.MissingKeyPolicy(7)))},
		{"WithLogger nil", noop, with(handler.WithLogger(nil))},
		{"WithOnOutcome nil", noop, with(handler.WithOnOutcome(nil))},
		{"WithRedactor nil", noop, with(handler.WithRedactor(nil))},
		{"WithStoreTimeout zero", noop, with(handler.WithStoreTimeout(0))},
		{"WithStoreTimeout negative", noop, with(handler.WithStoreTimeout(-time.Second))},
		{"WithStoreTimeout the default lease", noop, with(handler.WithStoreTimeout(middleware.DefaultLease))},
		{"WithStoreTimeout past the lease", noop, with(handler.WithLease(time.Second), handler.WithStoreTimeout(2*time.Second))},
		{"WithTracerProvider nil", noop, with(handler.WithTracerProvider(nil))},
		{"WithMeterProvider nil", noop, with(handler.WithMeterProvider(nil))},
		{"WithPropagator nil", noop, with(handler.WithPropagator(nil))},
		{"WithMessagingSystem empty", noop, with(handler.WithMessagingSystem(""))},
		{"WithPropagator without a tracer", noop, with(handler.WithPropagator(propagation.TraceContext{}))},
		{"WithMessagingSystem without a tracer", noop, with(handler.WithMessagingSystem("nats"))},
		{"policy in-process time past the lease", noop, with(handler.WithLease(time.Second),
			handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(2*time.Second))))},
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
