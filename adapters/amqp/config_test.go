package amqp_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
)

func TestOptionsAreValidatedBeforeConnecting(t *testing.T) {
	t.Parallel()
	// No server listens there: valid options would fail to connect instead.
	const url = "amqp://guest:guest@127.0.0.1:1/"
	for name, opt := range map[string]delivery.Option{
		"zero concurrency":     surelyamqp.WithConcurrency(0),
		"negative concurrency": surelyamqp.WithConcurrency(-1),
		"huge concurrency":     surelyamqp.WithConcurrency(1 << 16),
		"nil marshaler":        surelyamqp.WithMarshaler(nil),
		"nil AMQP config":      surelyamqp.WithAMQPConfig(nil),
		"nil logger":           delivery.WithLogger(nil),
		"zero close timeout":   delivery.WithCloseTimeout(0),
		"publisher's option":   surelyamqp.WithChannels(1),
	} {
		_, err := surelyamqp.NewSubscriber(url, opt)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	for name, opt := range map[string]delivery.Option{
		"zero channels":         surelyamqp.WithChannels(0),
		"too many channels":     surelyamqp.WithChannels(1025),
		"transient messages":    surelyamqp.WithMarshaler(wmamqp.DefaultMarshaler{NotPersistentDeliveryMode: true}),
		"transient (pointer)":   surelyamqp.WithMarshaler(&wmamqp.DefaultMarshaler{NotPersistentDeliveryMode: true}),
		"nil pointer":           surelyamqp.WithMarshaler((*wmamqp.DefaultMarshaler)(nil)),
		"subscriber's option":   surelyamqp.WithConcurrency(2),
		"nothing to wait for":   delivery.WithCloseTimeout(time.Second),
		"nil AMQP config (p)":   surelyamqp.WithAMQPConfig(nil),
		"nil marshaler (p)":     surelyamqp.WithMarshaler(nil),
		"negative channels (p)": surelyamqp.WithChannels(-1),
	} {
		_, err := surelyamqp.NewPublisher(url, opt)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := surelyamqp.NewSubscriber(url, surelyamqp.WithChannels(2))
	require.ErrorContains(t, err, "amqp.NewSubscriber does not take option WithChannels")
	_, err = surelyamqp.NewSubscriber("")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelyamqp.NewPublisher("")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)

	_, err = surelyamqp.NewSubscriber(url, surelyamqp.WithConcurrency(1<<16-1),
		surelyamqp.WithMarshaler(surelyamqp.DefaultMarshaler()), surelyamqp.WithAMQPConfig(&amqp.Config{}),
		delivery.WithLogger(slog.New(slog.DiscardHandler)), delivery.WithCloseTimeout(time.Second))
	require.Error(t, err)
	require.NotErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelyamqp.NewPublisher(url, surelyamqp.WithChannels(1024),
		surelyamqp.WithMarshaler(surelyamqp.DefaultMarshaler()), surelyamqp.WithAMQPConfig(&amqp.Config{}),
		delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.Error(t, err)
	require.NotErrorIs(t, err, delivery.ErrInvalidOption)
}

// Close gives up on a message nobody settles after WithCloseTimeout, not
// after the default 30s, and the broker gets it back.
func TestCloseTimeoutIsHonoured(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sub, err := surelyamqp.NewSubscriber(e.url, delivery.WithCloseTimeout(100*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	msgs, err := sub.Subscribe(t.Context(), e.topic)
	require.NoError(t, err)
	msg := receive(t, msgs)
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(delivery.DefaultCloseTimeout / 3):
		t.Fatal("Close still waits for the unsettled message")
	}
	require.Error(t, msg.Context().Err(), "the abandoned handler's context is cancelled")
	require.Eventually(t, func() bool { return e.ready(t, e.topic) == 1 }, 15*time.Second, 20*time.Millisecond,
		"the message is back in the queue")
}

func TestQueueArguments(t *testing.T) {
	t.Parallel()
	args := surelyamqp.QueueArguments()
	require.Equal(t, "quorum", args["x-queue-type"])
	require.EqualValues(t, surelyamqp.DeliveryLimit, args["x-delivery-limit"])
	args["x-queue-type"] = "classic"
	require.Equal(t, "quorum", surelyamqp.QueueArguments()["x-queue-type"], "a fresh table each call")
}
