package handler_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
)

func TestTelemetryOptionsAreValidated(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	require.NoError(t, err)
	fn := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	base := []handler.Option{handler.WithStore(store, "orders"), handler.WithDeadLetter(faults.NewPublisher(0), "dead")}
	for name, opts := range map[string][]handler.Option{
		"nil tracer provider":              {handler.WithTracerProvider(nil)},
		"nil meter provider":               {handler.WithMeterProvider(nil)},
		"nil propagator":                   {handler.WithPropagator(nil)},
		"empty messaging system":           {handler.WithMessagingSystem("")},
		"propagator without tracing":       {handler.WithPropagator(propagation.TraceContext{})},
		"messaging system without tracing": {handler.WithMessagingSystem("nats")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := handler.New(fn, append(base, opts...)...)
			require.ErrorIs(t, err, handler.ErrInvalidOption)
		})
	}
	_, err = handler.New(fn, append(base, handler.WithTracerProvider(tracenoop.NewTracerProvider()),
		handler.WithPropagator(propagation.TraceContext{}), handler.WithMessagingSystem("nats"))...)
	require.NoError(t, err)
}
