package amqp_test

import (
	"testing"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
)

func TestConfigIsValidatedBeforeConnecting(t *testing.T) {
	t.Parallel()
	// No server listens there: a valid config would fail to connect instead.
	const url = "amqp://guest:guest@127.0.0.1:1/"
	for name, cfg := range map[string]surelyamqp.Config{
		"negative concurrency": {Concurrency: -1},
		"huge concurrency":     {Concurrency: 1 << 16},
	} {
		_, err := surelyamqp.NewSubscriber(url, cfg, nil)
		require.ErrorIs(t, err, surelyamqp.ErrInvalidOption, name)
	}
	for name, cfg := range map[string]surelyamqp.PublisherConfig{
		"negative channels":   {Channels: -1},
		"too many channels":   {Channels: surelyamqp.MaxChannels + 1},
		"transient messages":  {Marshaler: wmamqp.DefaultMarshaler{NotPersistentDeliveryMode: true}},
		"transient (pointer)": {Marshaler: &wmamqp.DefaultMarshaler{NotPersistentDeliveryMode: true}},
	} {
		_, err := surelyamqp.NewPublisher(url, cfg, nil)
		require.ErrorIs(t, err, surelyamqp.ErrInvalidOption, name)
	}
	_, err := surelyamqp.NewSubscriber("", surelyamqp.Config{}, nil)
	require.ErrorIs(t, err, surelyamqp.ErrInvalidOption)
	_, err = surelyamqp.NewPublisher("", surelyamqp.PublisherConfig{}, nil)
	require.ErrorIs(t, err, surelyamqp.ErrInvalidOption)

	_, err = surelyamqp.NewSubscriber(url, surelyamqp.Config{}, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, surelyamqp.ErrInvalidOption)
	_, err = surelyamqp.NewPublisher(url, surelyamqp.PublisherConfig{}, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, surelyamqp.ErrInvalidOption)
}

func TestQueueArguments(t *testing.T) {
	t.Parallel()
	args := surelyamqp.QueueArguments()
	require.Equal(t, "quorum", args["x-queue-type"])
	require.EqualValues(t, surelyamqp.DeliveryLimit, args["x-delivery-limit"])
	args["x-queue-type"] = "classic"
	require.Equal(t, "quorum", surelyamqp.QueueArguments()["x-queue-type"], "a fresh table each call")
}
