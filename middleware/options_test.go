package middleware_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	mnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
)

// One Option type configures Dedup, Observe and Trace; each refuses the
// options it does not take instead of ignoring them, and a nil option.
func TestStepsRefuseOptionsTheyDoNotTake(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	tp := noop.NewTracerProvider()
	logger := slog.New(slog.DiscardHandler)
	onOutcome := func(context.Context, delivery.OutcomeParams) delivery.OutcomeResult {
		return delivery.OutcomeResult{}
	}

	// WithLogger means the same for both steps that log.
	_, err = middleware.Dedup(mem, "opts", middleware.WithLogger(logger))
	require.NoError(t, err)
	_, err = middleware.Observe(middleware.WithLogger(logger))
	require.NoError(t, err)
	for _, step := range []func(...middleware.Option) error{
		func(o ...middleware.Option) error { _, err := middleware.Dedup(mem, "opts", o...); return err },
		func(o ...middleware.Option) error { _, err := middleware.Observe(o...); return err },
	} {
		require.ErrorIs(t, step(middleware.WithLogger(nil)), middleware.ErrInvalidOption)
		require.ErrorIs(t, step(nil), middleware.ErrInvalidOption)
	}
	_, err = middleware.Trace(tp, nil)
	require.ErrorIs(t, err, middleware.ErrInvalidOption)

	for _, tc := range []struct {
		opt   middleware.Option
		name  string
		takes []string // the steps that take it
	}{
		{middleware.WithLease(time.Second), "WithLease", []string{"Dedup"}},
		{middleware.WithMaxAttempts(3), "WithMaxAttempts", []string{"Dedup"}},
		{middleware.WithExtension(time.Second, time.Minute), "WithExtension", []string{"Dedup"}},
		{middleware.WithStoreTimeout(time.Second), "WithStoreTimeout", []string{"Dedup"}},
		{middleware.WithHistoryRedactor(func(s string) string { return s }), "WithHistoryRedactor", []string{"Dedup"}},
		{middleware.WithLogger(logger), "WithLogger", []string{"Dedup", "Observe"}},
		{middleware.WithOnOutcome(onOutcome), "WithOnOutcome", []string{"Observe"}},
		{middleware.WithMeterProvider(mnoop.NewMeterProvider()), "WithMeterProvider", []string{"Observe"}},
		{middleware.WithMeterProvider(nil), "", nil}, // invalid everywhere
		{middleware.WithPropagator(propagation.TraceContext{}), "WithPropagator", []string{"Trace"}},
		{middleware.WithMessagingSystem("nats"), "WithMessagingSystem", []string{"Trace"}},
		{middleware.WithConsumerGroup("g"), "WithConsumerGroup", []string{"Trace"}},
	} {
		_, errDedup := middleware.Dedup(mem, "opts", tc.opt)
		_, errObserve := middleware.Observe(tc.opt)
		_, errTrace := middleware.Trace(tp, tc.opt)
		for step, err := range map[string]error{"Dedup": errDedup, "Observe": errObserve, "Trace": errTrace} {
			switch {
			case tc.name == "":
				require.ErrorIs(t, err, middleware.ErrInvalidOption, step)
			case slices.Contains(tc.takes, step):
				require.NoError(t, err, "%s with %s", step, tc.name)
			default:
				require.ErrorIs(t, err, middleware.ErrInvalidOption, "%s with %s", step, tc.name)
				require.ErrorContains(t, err, "middleware."+step+" does not take option "+tc.name)
			}
		}
	}
}
