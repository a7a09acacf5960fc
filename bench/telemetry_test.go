package bench

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/surely-dev/surely/handler"
)

// BenchmarkTelemetry is BenchmarkChain's surely_nullstore variant with
// observability off (no provider: the default), with the OTel API's no-op
// providers, and with the SDK (every span sampled and ended, metrics
// aggregated by a manual reader; nothing exported). off must allocate
// exactly what surely_nullstore does: instrumentation that is not
// configured costs nothing.
func BenchmarkTelemetry(b *testing.B) {
	for _, v := range []variant{
		{"off", surelyNullstore},
		{"noop_providers", func(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
			return telemetryChain(b, ps, fn, handler.WithTracerProvider(tracenoop.NewTracerProvider()),
				handler.WithMeterProvider(metricnoop.NewMeterProvider()))
		}},
		{"sdk", func(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = tp.Shutdown(b.Context()); _ = mp.Shutdown(b.Context()) })
			return telemetryChain(b, ps, fn, handler.WithTracerProvider(tp), handler.WithMeterProvider(mp))
		}},
	} {
		b.Run(v.name, func(b *testing.B) { runChain(b, v.chain, false) })
	}
}

func telemetryChain(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc, opts ...handler.Option) message.HandlerFunc {
	h, err := handler.New(fn, append([]handler.Option{
		handler.WithStore(nullStore{}, namespace),
		handler.WithDeadLetter(ps, deadTopic),
	}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return h
}
