package nats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	surelynats "github.com/surely-dev/surely/adapters/nats"
)

func TestConfigIsValidatedBeforeConnecting(t *testing.T) {
	t.Parallel()
	// No server listens there: a valid config would fail to connect instead.
	const url = "nats://127.0.0.1:1"
	for name, cfg := range map[string]surelynats.Config{
		"no consumer":       {},
		"dot in consumer":   {Consumer: "a.b"},
		"long consumer":     {Consumer: strings.Repeat("x", 65)},
		"short ack wait":    {Consumer: "c", AckWait: time.Millisecond},
		"negative parallel": {Consumer: "c", Concurrency: -1},
	} {
		_, err := surelynats.NewSubscriber(url, cfg, nil)
		require.ErrorIs(t, err, surelynats.ErrInvalidOption, name)
	}
	_, err := surelynats.NewSubscriber("", surelynats.Config{Consumer: "c"}, nil)
	require.ErrorIs(t, err, surelynats.ErrInvalidOption)
	_, err = surelynats.NewPublisher("", surelynats.PublisherConfig{}, nil)
	require.ErrorIs(t, err, surelynats.ErrInvalidOption)
	_, err = surelynats.NewSubscriber(url, surelynats.Config{Consumer: "c"}, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, surelynats.ErrInvalidOption)
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
		require.ErrorIs(t, surelynats.EnsureStream(ctx, e.admin, jetstream.StreamConfig{Name: e.stream}), surelynats.ErrInvalidOption)
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
		sub, err := surelynats.NewSubscriber(url, surelynats.Config{Consumer: e.consumer}, nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, sub.Close()) }()
		_, err = sub.Subscribe(t.Context(), "surely.test.nostream."+e.consumer)
		require.ErrorIs(t, err, surelynats.ErrNoStream)
	})
}
