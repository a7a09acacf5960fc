package integration_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
)

func TestOptionsAreValidatedBeforeConnecting(t *testing.T) {
	t.Parallel()
	// No server listens there: valid options would fail to connect instead.
	const url = "nats://127.0.0.1:1"
	for name, consumer := range map[string]string{
		"no consumer":     "",
		"dot in consumer": "a.b",
		"long consumer":   strings.Repeat("x", 65),
	} {
		_, err := surelynats.NewSubscriber(url, consumer)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	for name, opt := range map[string]delivery.Option{
		"short ack wait":       delivery.WithAckWait(time.Millisecond),
		"zero concurrency":     delivery.WithConcurrency(0),
		"negative concurrency": delivery.WithConcurrency(-1),
		"nil marshaler":        surelynats.WithMarshaler(nil),
		"nil NATS option":      surelynats.WithNATSOptions(nats.Name("x"), nil),
		"nil logger":           delivery.WithLogger(nil),
		"zero close timeout":   delivery.WithCloseTimeout(0),
	} {
		_, err := surelynats.NewSubscriber(url, "c", opt)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	for name, opt := range map[string]delivery.Option{
		"subscriber's concurrency": delivery.WithConcurrency(2),
		"subscriber's ack wait":    delivery.WithAckWait(time.Second),
		"nothing to wait for":      delivery.WithCloseTimeout(time.Second),
		"nil marshaler":            surelynats.WithMarshaler(nil),
	} {
		_, err := surelynats.NewPublisher(url, opt)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := surelynats.NewPublisher(url, delivery.WithAckWait(time.Second))
	require.ErrorContains(t, err, "nats.NewPublisher does not take option WithAckWait")
	_, err = surelynats.NewSubscriber("", "c")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelynats.NewPublisher("")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)

	connect := surelynats.WithNATSOptions(nats.Timeout(time.Second), nats.MaxReconnects(0))
	_, err = surelynats.NewSubscriber(url, "c", delivery.WithAckWait(100*time.Millisecond),
		delivery.WithConcurrency(1), surelynats.WithMarshaler(&wmnats.NATSMarshaler{}), connect,
		delivery.WithLogger(slog.New(slog.DiscardHandler)), delivery.WithCloseTimeout(time.Second))
	require.Error(t, err)
	require.NotErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelynats.NewPublisher(url, surelynats.WithMarshaler(&wmnats.NATSMarshaler{}), connect,
		delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.Error(t, err)
	require.NotErrorIs(t, err, delivery.ErrInvalidOption)
}

func TestConsumerName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "billing-orders", surelynats.ConsumerName("billing", "orders"))
	a := surelynats.ConsumerName("billing", "orders.created")
	b := surelynats.ConsumerName("billing", "orders_created")
	require.NotEqual(t, a, b, "topics that sanitize alike must not share a consumer")
	require.True(t, strings.HasPrefix(a, "billing-orders_created-"), a)
	require.NotContains(t, a, ".")
	long := surelynats.ConsumerName("billing", strings.Repeat("t", 500))
	require.Less(t, len(long), 200)
}

func TestEnsureStream(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, url string) {
		e := setup(t, url)
		ctx := t.Context()
		require.NoError(t, surelynats.EnsureStream(ctx, e.admin, jetstream.StreamConfig{Name: e.stream, Subjects: []string{e.topic}}),
			"ensuring an existing stream again is a no-op")
		err := surelynats.EnsureStream(ctx, e.admin, jetstream.StreamConfig{Name: e.stream, Subjects: []string{e.topic, e.topic + ".other"}})
		require.Error(t, err, "an existing stream that lacks a subject is reported, not changed")
		s, err := e.js.Stream(ctx, e.stream)
		require.NoError(t, err)
		require.Equal(t, []string{e.topic}, s.CachedInfo().Config.Subjects)
		require.ErrorIs(t, surelynats.EnsureStream(ctx, e.admin, jetstream.StreamConfig{Name: e.stream}), delivery.ErrInvalidOption)
	})
}

func TestPublisherWaitsForPubAckAndDedupsByUUID(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, url string) {
		e := setup(t, url)
		msg := message.NewMessage(watermill.NewUUID(), []byte("pay 10"))
		require.NoError(t, e.pub.Publish(e.topic, msg))
		require.NoError(t, e.pub.Publish(e.topic, msg), "a second publish of one message is accepted")
		s, err := e.js.Stream(t.Context(), e.stream)
		require.NoError(t, err)
		info, err := s.Info(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 1, info.State.Msgs, "and stored once (Nats-Msg-Id)")
		require.Error(t, e.pub.Publish("surely.test.nostream."+e.consumer, msg),
			"publishing where no stream listens must fail, not vanish")
	})
}

func TestSubscribeWithoutStreamFails(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, url string) {
		e := setup(t, url)
		sub, err := surelynats.NewSubscriber(url, e.consumer)
		require.NoError(t, err)
		defer func() { require.NoError(t, sub.Close()) }()
		_, err = sub.Subscribe(t.Context(), "surely.test.nostream."+e.consumer)
		require.ErrorIs(t, err, surelynats.ErrNoStream)
	})
}
