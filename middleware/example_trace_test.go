package middleware_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/propagate"
	"github.com/surely-dev/surely/retry"
)

// Trace outermost, then Observe, Retry, Identity and Dedup (the order
// handler.New uses): a message whose first attempt fails gets two spans,
// the second linked to the first and both to the producer's span.
func ExampleTrace() {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	store, _ := memstore.New()

	trace, _ := middleware.Trace(tp, middleware.WithMessagingSystem("nats"))
	observe, _ := middleware.Observe()
	policy, _ := retry.NewPolicy(retry.WithBackoff(0, 0))
	retrier, _ := middleware.Retry(policy, nil)
	dedup, _ := middleware.Dedup(store, "reserve-stock")
	calls := 0
	h := trace(observe(retrier(dedup(func(*message.Message) ([]*message.Message, error) {
		if calls++; calls == 1 {
			return nil, errors.New("warehouse API timed out")
		}
		return nil, nil
	}))))

	// The producer: a span, and propagate to stamp key and traceparent.
	ctx, send := tp.Tracer("shop").Start(context.Background(), "send orders")
	msg := message.NewMessage("order-7", []byte(`{"sku":"A-1"}`))
	msg.SetContext(ctx)
	stamp, _ := propagate.NewPublisher(nopPublisher{})
	_ = stamp.Stamp(msg)
	send.End()

	_, err := h(msg)
	fmt.Println("error:", err)
	for _, s := range recorder.Ended()[1:] {
		var outcome string
		for _, kv := range s.Attributes() {
			if kv.Key == "surely.outcome" {
				outcome = kv.Value.AsString()
			}
		}
		var links []string
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				if kv.Key == "surely.link" {
					links = append(links, kv.Value.AsString())
				}
			}
		}
		fmt.Println(s.Name(), outcome, links)
	}
	// Output:
	// error: <nil>
	// process retry [creation]
	// process processed [creation previous_attempt]
}

type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
