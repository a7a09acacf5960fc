package amqp_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
)

func TestPublisherDeclaresAQuorumQueueAndPublishesPersistently(t *testing.T) {
	t.Parallel()
	e := setup(t)
	msg := message.NewMessage(watermill.NewUUID(), []byte("pay 10"))
	msg.Metadata.Set("k", "v")
	require.NoError(t, e.pub.Publish(e.topic, msg))
	require.Equal(t, 1, e.ready(t, e.topic), "stored when Publish returns (confirmed)")

	_, err := e.channel(t).QueueDeclare(e.topic, true, false, false, false, surelyamqp.QueueArguments())
	require.NoError(t, err, "the queue was declared with surely's arguments")
	_, err = e.channel(t).QueueDeclare(e.topic, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.Error(t, err, "... as a quorum queue")

	d, ok, err := e.channel(t).Get(e.topic, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, "pay 10", string(d.Body))
	require.Equal(t, msg.UUID, d.Headers["_watermill_message_uuid"])
	require.Equal(t, "v", d.Headers["k"])
}

func TestPublishRefusesBadTopics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	require.Error(t, e.pub.Publish("", msg))
	require.Error(t, e.pub.Publish("amq.direct", msg))
}

func TestOneAMQPConfigForBothSides(t *testing.T) {
	t.Parallel()
	e := setup(t)
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("surely test " + e.topic)
	cfg := &amqp.Config{Heartbeat: 5 * time.Second, Locale: "en_US", Properties: props}
	var wg sync.WaitGroup
	var pub *surelyamqp.Publisher
	var sub *surelyamqp.Subscriber
	var perr, serr error
	wg.Go(func() { pub, perr = surelyamqp.NewPublisher(e.url, surelyamqp.WithAMQPConfig(cfg)) })
	wg.Go(func() { sub, serr = surelyamqp.NewSubscriber(e.url, surelyamqp.WithAMQPConfig(cfg)) })
	wg.Wait()
	require.NoError(t, perr)
	require.NoError(t, serr)
	require.NoError(t, pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	msgs, err := sub.Subscribe(t.Context(), e.topic)
	require.NoError(t, err)
	msg := receive(t, msgs)
	msg.Ack()
	require.NoError(t, sub.Close())
	require.NoError(t, pub.Close())
	require.Zero(t, e.ready(t, e.topic))
	require.NotContains(t, cfg.Properties, "capabilities", "the caller's table is left alone")
}
