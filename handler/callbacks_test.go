package handler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
)

// Every user callback surely calls around the handler is contained: a
// panic in it never escapes the chain (where the router would recover it,
// nack, and redeliver without end), and the message ends within its
// budget: processed, or dead-lettered once.

// deliverContained redelivers like a broker until the chain acks, at most
// max times, failing the test if a panic escapes the chain. It returns the
// number of deliveries.
func deliverContained(t *testing.T, h message.HandlerFunc, newMsg func() *message.Message, max int) int {
	t.Helper()
	for i := 1; i <= max; i++ {
		var err error
		var escaped any
		func() {
			defer func() { escaped = recover() }()
			_, err = h(newMsg())
		}()
		require.Nil(t, escaped, "delivery %d: a panic escaped the chain", i)
		if err == nil {
			return i
		}
	}
	t.Fatalf("not acked after %d deliveries", max)
	return 0
}

func TestPanickingKeySourceIsDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.KeySource(func(msg *message.Message) (string, error) {
			var tenants []string
			return tenants[len(msg.Metadata.Get("tenant"))], nil // index out of range
		})))
		require.NoError(t, err)
		var calls atomic.Int32
		h := e.chain(t, func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil },
			handler.WithIdentity(ex, handler.ProcessWithoutDedup))
		n := deliverContained(t, h, func() *message.Message { return delivery("order-1", "pay 10") }, 10)
		require.Equal(t, 1, n, "dead-lettered at once: a key source has no budget of its own")
		require.Zero(t, calls.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		require.Equal(t, string(dlq.ReasonPanic), dead[0].Metadata.Get(dlq.KeyReason))
		require.Contains(t, dead[0].Metadata.Get(dlq.KeyError), "key source panicked")
		require.Contains(t, dead[0].Metadata.Get(dlq.KeyError), "index out of range")
	})
}

// TestPanickingOnOutcomeIsBounded: an OnOutcome callback that panics on
// every call changes nothing about the delivery: a message that succeeds
// is acked once; one that keeps failing ends in exactly one dead letter
// after the budget of attempts (3), not in a redelivery loop.
func TestPanickingOnOutcomeIsBounded(t *testing.T) {
	t.Parallel()
	panicky := handler.WithOnOutcome(func(context.Context, handler.OutcomeParams) handler.OutcomeResult {
		panic("dashboard client is nil")
	})
	t.Run("processed", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, 0)
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))
			var calls atomic.Int32
			h := e.chain(t, func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil },
				panicky, handler.WithLogger(logger))
			n := deliverContained(t, h, func() *message.Message { return delivery("order-1", "pay 10") }, 10)
			require.Equal(t, 1, n)
			require.EqualValues(t, 1, calls.Load())
			require.Empty(t, e.dead.Published(deadTopic))
			require.Contains(t, logs.String(), "level=ERROR")
			require.Contains(t, logs.String(), "OnOutcome callback panicked")
			require.Contains(t, logs.String(), "dashboard client is nil")
		})
	})
	t.Run("failing", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, 0)
			var calls atomic.Int32
			h := e.chain(t, func(*message.Message) ([]*message.Message, error) {
				calls.Add(1)
				return nil, errors.New("inventory 503")
			}, panicky)
			n := deliverContained(t, h, func() *message.Message { return delivery("order-1", "pay 10") }, 20)
			require.Equal(t, 4, n, "3 attempts, then the exhausted claim dead-letters")
			require.EqualValues(t, 3, calls.Load(), "at most the budget of attempts")
			require.Len(t, e.dead.Published(deadTopic), 1, "exactly one dead letter")
		})
	})
}

// TestPanickingRedactorWithholdsTheText: a redactor that panics cannot
// redact, so the text it was given is withheld (never written unredacted)
// from the history and the dead letter; the message ends dead-lettered
// after its budget.
func TestPanickingRedactorWithholdsTheText(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(*message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, errors.New("connect postgres://app:hunter2@db: refused")
		}, handler.WithRedactor(func(s string) string {
			if strings.Contains(s, "hunter2") {
				panic(fmt.Sprintf("bad pattern for %q", s))
			}
			return s
		}))
		n := deliverContained(t, h, func() *message.Message { return delivery("order-1", "pay 10") }, 20)
		require.Equal(t, 4, n)
		require.EqualValues(t, 3, calls.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		require.Equal(t, string(dlq.ReasonExhausted), dead[0].Metadata.Get(dlq.KeyReason))
		for k, v := range dead[0].Metadata {
			require.NotContains(t, v, "hunter2", "metadata %q", k)
		}
		require.Contains(t, dead[0].Metadata.Get(dlq.KeyError), "redactor panicked")
		rec, err := e.mem.Get(t.Context(), "orders", "order-1")
		require.NoError(t, err)
		for _, a := range rec.History {
			require.NotContains(t, a.Error, "hunter2")
		}
	})
}

// panickyPropagator reads the creation context from the metadata, and
// panics.
type panickyPropagator struct{ propagation.TraceContext }

func (panickyPropagator) Extract(context.Context, propagation.TextMapCarrier) context.Context {
	panic("propagator: malformed baggage")
}

// TestPanickingPropagatorIsContained: the propagator that extracts the
// creation context from the metadata is only for the trace: when it panics
// the message is processed without the creation link.
func TestPanickingPropagatorIsContained(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		tp := sdktrace.NewTracerProvider()
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		var calls atomic.Int32
		h := e.chain(t, func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil },
			handler.WithTracerProvider(tp), handler.WithPropagator(panickyPropagator{}))
		n := deliverContained(t, h, func() *message.Message { return delivery("order-1", "pay 10") }, 10)
		require.Equal(t, 1, n)
		require.EqualValues(t, 1, calls.Load())
	})
}
