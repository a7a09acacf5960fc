package amqp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/retry"
)

// count returns the number of messages ready in queue, or -1 when the
// queue does not exist.
func (e *env) count(t *testing.T, queue string) int {
	t.Helper()
	ch, err := e.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return -1
	}
	require.NoError(t, err)
	return q.Messages
}

func TestPublishToADeletedQueueFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("1"))))
	_, err := e.channel(t).QueueDelete(e.topic, false, false, false)
	require.NoError(t, err)

	err = e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("2")))
	require.Error(t, err, "no queue took the message: RabbitMQ confirms it, and it is gone")
	require.ErrorIs(t, err, surelyamqp.ErrUnroutable)
	require.Equal(t, -1, e.count(t, e.topic), "a failed publish does not recreate the queue")

	require.NoError(t, e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("3"))),
		"the next Publish declares the queue again")
	require.Equal(t, 1, e.count(t, e.topic))
}

// The Subscriber refuses a queue with other arguments than surely's, among
// them those that can drop a confirmed message. (The Publisher uses an
// existing queue as it is: TestPublishToAnExistingQueueKeepsItAsItIs.)
func TestSubscribeRefusesAQueueThatCanDropMessages(t *testing.T) {
	t.Parallel()
	with := func(k string, v any) amqp.Table {
		a := surelyamqp.QueueArguments()
		a[k] = v
		return a
	}
	for name, q := range map[string]struct {
		durable bool
		args    amqp.Table
	}{
		"transient classic": {false, nil},
		"durable classic":   {true, amqp.Table{"x-queue-type": "classic"}},
		"drop-head":         {true, with("x-max-length", int64(1))},
		"message TTL":       {true, with("x-message-ttl", int64(1000))},
		"expires":           {true, with("x-expires", int64(60_000))},
		// Safe, but not surely's: refused too.
		"reject-publish": {true, amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			_, err := e.channel(t).QueueDeclare(e.topic, q.durable, false, false, false, q.args)
			require.NoError(t, err)
			sub, err := surelyamqp.NewSubscriber(e.url)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, sub.Close()) })
			err = sub.SubscribeInitialize(e.topic)
			require.Error(t, err, "a queue that can drop a confirmed message is refused")
			require.ErrorIs(t, err, surelyamqp.ErrQueueMismatch)
			require.Zero(t, e.count(t, e.topic))
		})
	}
}

// A dead-letter queue deleted (by an operator, or x-expires) after the first
// dead letter: the next dead letter must not be confirmed into nowhere while
// its source message is acked.
func TestDeadLetterToADeletedQueueLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dead := e.topic + ".dead"
	e.deleteAtEnd(t, dead)
	deadPub, err := surelyamqp.NewPublisher(e.url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, deadPub.Close()) })
	_, stop := e.consume(t, nil, e.chain(t, func(*message.Message) ([]*message.Message, error) {
		return nil, retry.Permanent(errors.New("poison"))
	}, handler.WithDeadLetter(deadPub, dead)))

	e.publish(t, "order-1", "first")
	require.Eventually(t, func() bool { return e.count(t, dead) == 1 }, 15*time.Second, 10*time.Millisecond)
	_, err = e.channel(t).QueueDelete(dead, false, false, false)
	require.NoError(t, err)

	second := e.publish(t, "order-2", "second")
	require.Eventually(t, func() bool { return e.count(t, dead) == 1 }, 15*time.Second, 10*time.Millisecond,
		"the second dead letter must reach a dead-letter queue")
	stop()
	require.Zero(t, e.ready(t, e.topic), "the source is acked after its dead letter")
	var deliveries int
	var failed bool
	for _, s := range e.rec.all() {
		if s.uuid == second.UUID {
			deliveries++
			failed = failed || (deliveries == 1 && s.chainErr != nil)
		}
	}
	require.True(t, failed, "the first dead-letter publish to the deleted queue failed")
	require.GreaterOrEqual(t, deliveries, 2, "... and the source message was nacked, not acked")
	d, ok, err := e.channel(t).Get(dead, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "second", string(d.Body))
}

func TestPublisherReconnectsAndCloses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pub, err := surelyamqp.NewPublisher(e.url, surelyamqp.WithChannels(1))
	require.NoError(t, err)
	require.NoError(t, pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("1"))))
	surelyamqp.DropPublisherConnection(pub)
	require.NoError(t, pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("2"))),
		"a lost connection is dialed again by the next Publish")
	require.Equal(t, 2, e.count(t, e.topic))
	require.NoError(t, pub.Close())
	require.NoError(t, pub.Close(), "Close twice")
	require.ErrorIs(t, pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("3"))), delivery.ErrClosed)
}
