package replay_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
)

// With a TracerProvider every publish is a "replay <topic>" producer span
// linked to the entry's dead-letter span; the message carries the span in
// its context (for the publisher) and the dead-letter link for the
// consumer's first attempt. A failed publish is a span error.
func TestReplaySpansLinkToTheDeadLetterSpan(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 2, entrySpec{retention: time.Hour})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pub := &ctxRecorder{}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("traced"), replay.WithTracerProvider(tp))...)
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	for i, s := range spans {
		require.Equal(t, "replay orders", s.Name())
		require.Equal(t, trace.SpanKindProducer, s.SpanKind())
		require.Contains(t, s.Attributes(), attribute.String("surely.replay_id", "traced"))
		require.Contains(t, s.Attributes(), attribute.String("surely.replay_of", ids[i]))
		require.Len(t, s.Links(), 1)
		link := s.Links()[0].SpanContext
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", link.TraceID().String())
		require.Equal(t, "00f067aa0ba902b7", link.SpanID().String())
	}
	require.Len(t, pub.msgs, 2)
	for i, m := range pub.msgs {
		require.Equal(t, spans[i].SpanContext().SpanID(), trace.SpanContextFromContext(m.Context()).SpanID(),
			"the publisher sees the replay span in the message context")
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", m.Metadata.Get(dlq.KeyReplayLink))
	}

	// A failing publish ends its span with an error.
	rec2 := tracetest.NewSpanRecorder()
	a2 := newArchive(t, c)
	deadLetters(t, a2, 0, 1, entrySpec{retention: time.Hour})
	failing := &recorder{clock: c, hook: func(published) error { return errors.New("broker down") }}
	_, err = replay.Run(t.Context(), a2, failing, archive.Filter{},
		on(c, replay.WithID("traced-fail"), replay.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2))))...)
	require.Error(t, err)
	require.Len(t, rec2.Ended(), 1)
	require.Equal(t, codes.Error, rec2.Ended()[0].Status().Code)
}

// ctxRecorder keeps the published messages themselves, contexts included.
type ctxRecorder struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (r *ctxRecorder) Publish(_ string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msgs...)
	return nil
}

func (r *ctxRecorder) Close() error { return nil }
