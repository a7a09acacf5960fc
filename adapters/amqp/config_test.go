package amqp_test

import (
	"log/slog"
	"testing"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
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
		"zero concurrency":     delivery.WithConcurrency(0),
		"negative concurrency": delivery.WithConcurrency(-1),
		"huge concurrency":     delivery.WithConcurrency(1 << 16),
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
		"subscriber's option":   delivery.WithConcurrency(2),
		"nothing to wait for":   delivery.WithCloseTimeout(time.Second),
		"nil AMQP config (p)":   surelyamqp.WithAMQPConfig(nil),
		"nil marshaler (p)":     surelyamqp.WithMarshaler(nil),
		"negative channels (p)": surelyamqp.WithChannels(-1),
	} {
		_, err := surelyamqp.NewPublisher(url, opt)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := surelyamqp.NewSubscriber(url, surelyamqp.WithChannels(2))
	require.ErrorContains(t, err, "amqp.NewSubscriber does not take option amqp.WithChannels")
	_, err = surelyamqp.NewSubscriber(url, delivery.WithAckWait(time.Second))
	require.ErrorContains(t, err, "amqp.NewSubscriber does not take option WithAckWait")
	_, err = surelyamqp.NewSubscriber(url, delivery.WithConcurrency(1<<16))
	require.ErrorContains(t, err, "amqp.NewSubscriber: WithConcurrency(65536) is not in 1..65535")
	_, err = surelyamqp.NewSubscriber("")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelyamqp.NewPublisher("")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)

	_, err = surelyamqp.NewSubscriber(url, delivery.WithConcurrency(1<<16-1),
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

func TestQueueArguments(t *testing.T) {
	t.Parallel()
	args := surelyamqp.QueueArguments()
	require.Equal(t, "quorum", args["x-queue-type"])
	require.EqualValues(t, surelyamqp.DeliveryLimit, args["x-delivery-limit"])
	args["x-queue-type"] = "classic"
	require.Equal(t, "quorum", surelyamqp.QueueArguments()["x-queue-type"], "a fresh table each call")
}
