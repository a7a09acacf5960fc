package propagate_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/propagate"
)

func setup(t *testing.T, failFirst int, opts ...propagate.Option) (*propagate.Publisher, *faults.Publisher, trace.Tracer) {
	t.Helper()
	inner := faults.NewPublisher(failFirst)
	pub, err := propagate.NewPublisher(inner, opts...)
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return pub, inner, tp.Tracer("test")
}

func TestRetriedPublishKeepsKeyTraceAndTime(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	pub, inner, tracer := setup(t, 1, propagate.WithClock(func() time.Time { clock = clock.Add(time.Second); return clock }))
	ctx, span := tracer.Start(context.Background(), "send orders")
	msg := message.NewMessage("6a1d6c2e-3d8a-4b43-9d5e-2f0c2a9b7f10", []byte(`{"order":1}`))
	msg.SetContext(ctx)

	require.ErrorIs(t, pub.Publish("orders", msg), faults.ErrInjected, "the first try fails")
	first := msg.Metadata.Get("traceparent")
	span.End()
	// The producer retries the same message, now outside the span.
	msg.SetContext(context.Background())
	require.NoError(t, pub.Publish("orders", msg))

	got := inner.Published("orders")
	require.Len(t, got, 1)
	md := got[0].Metadata
	assert.Equal(t, msg.UUID, md.Get(idempotency.DefaultMetadataKey), "the default key is the UUID")
	assert.Equal(t, first, md.Get("traceparent"), "the retry keeps the creation context")
	assert.Contains(t, md.Get("traceparent"), span.SpanContext().SpanID().String())
	assert.Equal(t, "2026-11-30T09:00:01Z", md.Get(propagate.KeyPublishedAt), "the time of the first try")
}

func TestACopyWithTheSameUUIDGetsTheSameKey(t *testing.T) {
	t.Parallel()
	pub, inner, _ := setup(t, 0)
	a := message.NewMessage("order-42", []byte("x"))
	b := message.NewMessage("order-42", []byte("x"))
	require.NoError(t, pub.Publish("orders", a, b))
	got := inner.Published("orders")
	require.Len(t, got, 2)
	assert.Equal(t, got[0].Metadata.Get(idempotency.DefaultMetadataKey), got[1].Metadata.Get(idempotency.DefaultMetadataKey))
}

func TestAnExistingKeyIsKept(t *testing.T) {
	t.Parallel()
	pub, inner, _ := setup(t, 0, propagate.WithKeyMetadata("op"), propagate.WithKey(func(*message.Message) (string, error) {
		return "", errors.New("must not be called")
	}))
	msg := message.NewMessage("u-1", nil)
	msg.Metadata.Set("op", "charge:42")
	require.NoError(t, pub.Publish("orders", msg))
	assert.Equal(t, "charge:42", inner.Published("orders")[0].Metadata.Get("op"))
}

func TestBadKeysAreRejectedAndNothingIsPublished(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		key  string
		uuid string
		fn   func(*message.Message) (string, error)
	}{
		"empty UUID":        {uuid: ""},
		"too long key":      {uuid: "u", key: strings.Repeat("k", defaults.MaxKeyLen+1)},
		"control character": {uuid: "u", key: "a\x00b"},
		"key function fails": {uuid: "u", fn: func(*message.Message) (string, error) {
			return "", errors.New("no order id in payload")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var opts []propagate.Option
			if tc.fn != nil {
				opts = append(opts, propagate.WithKey(tc.fn))
			}
			pub, inner, _ := setup(t, 0, opts...)
			good := message.NewMessage("good", nil)
			bad := message.NewMessage(tc.uuid, nil)
			if tc.key != "" {
				bad.Metadata.Set(idempotency.DefaultMetadataKey, tc.key)
			}
			err := pub.Publish("orders", good, bad)
			require.ErrorIs(t, err, propagate.ErrInvalidKey)
			assert.Empty(t, inner.Published("orders"), "nothing published, nothing lost silently")
		})
	}
}

func TestStampOfABadKeyChangesNothing(t *testing.T) {
	t.Parallel()
	pub, _, _ := setup(t, 0)
	bad := message.NewMessage("u", nil)
	bad.Metadata.Set(idempotency.DefaultMetadataKey, "a\x00b")
	want := maps.Clone(bad.Metadata)
	require.ErrorIs(t, pub.Stamp(bad), propagate.ErrInvalidKey)
	assert.Equal(t, want, bad.Metadata)

	none := message.NewMessage("", nil) // an empty UUID is no key
	none.Metadata = nil
	require.ErrorIs(t, pub.Stamp(none), propagate.ErrInvalidKey)
	assert.Nil(t, none.Metadata)
}

func TestCustomPropagator(t *testing.T) {
	t.Parallel()
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	pub, inner, tracer := setup(t, 0, propagate.WithPropagator(prop))
	ctx, span := tracer.Start(context.Background(), "send")
	defer span.End()
	msg := message.NewMessage("u-2", nil)
	msg.SetContext(ctx)
	require.NoError(t, pub.Publish("orders", msg))
	md := inner.Published("orders")[0].Metadata
	sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(md)))
	assert.Equal(t, span.SpanContext().SpanID(), sc.SpanID())
}

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	_, err := propagate.NewPublisher(nil)
	require.ErrorIs(t, err, propagate.ErrInvalidOption)
	for _, o := range []propagate.Option{
		propagate.WithKeyMetadata(""), propagate.WithKey(nil), propagate.WithPropagator(nil), propagate.WithClock(nil),
		nil, // a nil option is refused, as in every other family
	} {
		_, err := propagate.NewPublisher(faults.NewPublisher(0), o)
		require.ErrorIs(t, err, propagate.ErrInvalidOption)
	}
}
