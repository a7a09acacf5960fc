package amqp_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
)

// A queue that existed before the Publisher (made by an operator, or by
// an older surely) is published to as it is, whatever its arguments: a
// refusal would make every message a handler produces to it fail, and the
// router's nack-and-redeliver loop re-emit it without end.
func TestPublishToAnExistingQueueKeepsItAsItIs(t *testing.T) {
	t.Parallel()
	with := func(k string, v any) amqp.Table {
		a := surelyamqp.QueueArguments()
		a[k] = v
		return a
	}
	for name, args := range map[string]amqp.Table{
		"durable classic":         nil,
		"dead-letter exchange":    with("x-dead-letter-exchange", "dlx"),
		"single active consumer":  with("x-single-active-consumer", true),
		"length limit, rejecting": {"x-max-length": int64(10), "x-overflow": "reject-publish"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			_, err := e.channel(t).QueueDeclare(e.topic, true, false, false, false, args)
			require.NoError(t, err)
			require.NoError(t, e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
			require.Equal(t, 1, e.count(t, e.topic))
		})
	}
}

// A queue with other arguments than surely's is still refused by the
// Subscriber (as it always was), and the Publisher's acceptance of it does
// not change it.
func TestSubscribeStillRefusesAQueueWithOtherArguments(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, err := e.channel(t).QueueDeclare(e.topic, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	sub, err := surelyamqp.NewSubscriber(e.url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	_, err = sub.Subscribe(t.Context(), e.topic)
	require.ErrorIs(t, err, surelyamqp.ErrQueueMismatch)
	require.ErrorIs(t, sub.SubscribeInitialize(e.topic), surelyamqp.ErrQueueMismatch)
	require.Equal(t, 1, e.count(t, e.topic))
}

// A channel lost between a message's send and its confirmation closes the
// channel's return listener: that is not a returned (unroutable) message.
func TestPublishOnALostChannelIsNotUnroutable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pub, err := surelyamqp.NewPublisher(e.url, surelyamqp.WithChannels(1))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	lose := true
	surelyamqp.AfterSend(pub, func(ch *amqp.Channel) {
		if lose {
			lose = false
			_ = ch.Close()
		}
	})
	err = pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("1")))
	// The broker may have confirmed the message before the channel closed.
	if err != nil {
		require.NotErrorIs(t, err, surelyamqp.ErrUnroutable, "a lost channel is not a returned message")
	}
	require.NoError(t, pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("2"))),
		"the next Publish opens a new channel")
}

// ErrClosed is both sides' error after Close, and reads so.
func TestErrClosedFitsThePublisher(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pub, err := surelyamqp.NewPublisher(e.url)
	require.NoError(t, err)
	require.NoError(t, pub.Close())
	err = pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("x")))
	require.ErrorIs(t, err, delivery.ErrClosed)
	require.Contains(t, err.Error(), "publisher")
}
