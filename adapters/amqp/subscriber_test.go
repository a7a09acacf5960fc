package amqp_test

import (
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
)

func TestAckOnlyAfterSuccess(t *testing.T) {
	t.Parallel()
	e := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	var calls atomic.Int32
	_, stop := e.consume(t, nil, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return nil, nil
	}))
	t.Cleanup(releaseOnce) // runs before the subscriber is closed
	e.publish(t, "order-1", "pay 10")
	receive(t, started)
	require.Zero(t, e.ready(t, e.topic), "the message is delivered ...")
	_, ok, err := e.channel(t).Get(e.topic, false)
	require.NoError(t, err)
	require.False(t, ok, "... and held unacked by the subscriber while the handler runs")

	releaseOnce()
	require.Eventually(t, func() bool { return len(e.rec.all()) == 1 }, 10*time.Second, 10*time.Millisecond)
	stop() // waits for the ack to be sent; an unacked message would be requeued now
	require.Zero(t, e.ready(t, e.topic), "the message must have been acked after the handler succeeded")
	got := e.rec.all()
	require.Len(t, got, 1)
	require.EqualValues(t, 1, calls.Load())
	s := got[0]
	require.NoError(t, s.chainErr)
	require.True(t, s.hasInfo)
	require.Equal(t, delivery.Info{Count: 1, Redelivered: false}, s.info)
	require.True(t, s.hasControl)
	require.Equal(t, handlerName, s.handler, "the router's context values must survive")
	require.Equal(t, e.topic, s.topic)
	require.Equal(t, "pay 10", s.payload)
	require.Equal(t, "order-1", s.metadata.Get(idempotency.DefaultMetadataKey))
}

func TestNackRedeliversWithCount(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var calls atomic.Int32
	infos := make(chan delivery.Info, 4)
	_, stop := e.consume(t, nil, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		info, _ := delivery.InfoFrom(msg.Context())
		infos <- info
		if calls.Add(1) <= 2 {
			return nil, errors.New("database busy")
		}
		return nil, nil
	}))
	e.publish(t, "order-1", "pay 10")
	require.Equal(t, delivery.Info{Count: 1}, receive(t, infos))
	require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, receive(t, infos),
		"the handler must see the quorum queue's delivery count")
	require.Equal(t, delivery.Info{Count: 3, Redelivered: true}, receive(t, infos))
	require.Eventually(t, func() bool {
		got := e.rec.all()
		return len(got) == 3 && got[2].chainErr == nil
	}, 10*time.Second, 10*time.Millisecond)
	stop()
	require.Zero(t, e.ready(t, e.topic))
	require.EqualValues(t, 3, calls.Load())
	for _, s := range e.rec.all() {
		require.NotContains(t, s.metadata, surelyamqp.DeliveryCountHeader,
			"the broker's count is in delivery.Info, not in the metadata that surely would publish again")
	}
}

func TestConnectionLostMidHandlerRedelivers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	infos := make(chan delivery.Info, 4)
	var calls atomic.Int32
	sub, stop := e.consume(t, nil, func(msg *message.Message) error {
		info, _ := delivery.InfoFrom(msg.Context())
		infos <- info
		if calls.Add(1) == 1 {
			close(first)
			<-release // then acked, in vain: the channel it came on is gone
		}
		return nil
	})
	t.Cleanup(releaseOnce) // runs before the subscriber is closed
	e.publish(t, "order-1", "pay 10")
	receive(t, first)
	require.Equal(t, delivery.Info{Count: 1}, receive(t, infos))

	surelyamqp.DropConnection(sub)

	require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, receive(t, infos),
		"the unacked message comes back, on the subscriber's new connection")
	releaseOnce()
	require.Eventually(t, func() bool { return len(e.rec.all()) == 2 }, 10*time.Second, 10*time.Millisecond)
	stop()
	require.Zero(t, e.ready(t, e.topic), "the redelivery was acked")
}

func TestConcurrencyIsThePrefetch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	release := make(chan struct{})
	var running, most atomic.Int32
	_, stop := e.consume(t, []delivery.Option{delivery.WithConcurrency(3)}, func(msg *message.Message) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		return nil
	})
	for i := range 5 {
		e.publish(t, "order-"+string(rune('a'+i)), "pay")
	}
	require.Eventually(t, func() bool { return running.Load() == 3 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.EqualValues(t, 3, running.Load(), "Concurrency messages in flight at once")
	require.Equal(t, 2, e.ready(t, e.topic), "the rest stays in the queue for other consumers")
	close(release)
	require.Eventually(t, func() bool { return len(e.rec.all()) == 5 }, 10*time.Second, 10*time.Millisecond)
	stop()
	require.EqualValues(t, 3, most.Load())
	require.Zero(t, e.ready(t, e.topic))
}

func TestMalformedMessageIsDeadLetteredAndConsumingGoesOn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var processed atomic.Int32
	intHeader := make(chan message.Metadata, 1)
	_, stop := e.consume(t, nil, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(idempotency.DefaultMetadataKey) == "order-int" {
			intHeader <- maps.Clone(msg.Metadata)
		}
		processed.Add(1)
		return nil, nil
	}))
	// Declare the queue before publishing to it directly.
	sub, err := surelyamqp.NewSubscriber(e.url)
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(e.topic))
	require.NoError(t, sub.Close())

	// Headers another client set as numbers: decoded as text.
	e.publishRaw(t, amqp.Publishing{Body: []byte("pay 5"), DeliveryMode: amqp.Persistent, Headers: amqp.Table{
		"_watermill_message_uuid":      "uuid-int",
		idempotency.DefaultMetadataKey: "order-int",
		"retries":                      int32(5),
		"priority":                     int64(-2),
		"urgent":                       true,
	}})
	// A table in a header: no string form in Watermill metadata.
	e.publishRaw(t, amqp.Publishing{Body: []byte("raw \x00 bytes"), DeliveryMode: amqp.Persistent, Headers: amqp.Table{
		"_watermill_message_uuid":      "uuid-bad",
		idempotency.DefaultMetadataKey: "order-bad",
		"nested":                       amqp.Table{"a": int32(1)},
	}})
	for i := range 3 {
		e.publish(t, "order-"+string(rune('a'+i)), "pay")
	}
	require.Eventually(t, func() bool {
		return processed.Load() == 4 && len(e.dead.Published(deadTopic)) == 1
	}, 15*time.Second, 10*time.Millisecond, "the malformed message must not stop the subscription")

	md := receive(t, intHeader)
	require.Equal(t, "5", md.Get("retries"))
	require.Equal(t, "-2", md.Get("priority"))
	require.Equal(t, "true", md.Get("urgent"))

	dead := e.dead.Published(deadTopic)[0]
	require.Equal(t, "raw \x00 bytes", string(dead.Payload), "raw bytes travel to the dead letter")
	require.Equal(t, string(dlq.ReasonDecode), dead.Metadata.Get(dlq.KeyReason))
	require.Equal(t, "uuid-bad", dead.Metadata.Get(dlq.KeyOriginalUUID))
	require.Contains(t, dead.Metadata.Get(delivery.KeyDecodeError), "nested is not a string")
	require.JSONEq(t, `{"_watermill_message_uuid":"uuid-bad","idempotency_key":"order-bad","nested":{"a":1}}`,
		dead.Metadata.Get(delivery.KeyDecodeHeaders))
	require.True(t, strings.Contains(dead.Metadata.Get(dlq.KeyError), middleware.ErrUndecodable.Error()))

	stop()
	require.Zero(t, e.ready(t, e.topic), "everything acked, the malformed message after its dead letter")
	marked := 0
	for _, s := range e.rec.all() {
		if s.decodeMarked {
			marked++
			require.True(t, s.hasInfo && s.hasControl)
			require.Equal(t, delivery.Info{Count: 1}, s.info, "dead-lettered at the first delivery")
		}
	}
	require.Equal(t, 1, marked)
}

func TestSubscribeRefusesAClassicQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, err := e.channel(t).QueueDeclare(e.topic, true, false, false, false, nil)
	require.NoError(t, err)
	sub, err := surelyamqp.NewSubscriber(e.url)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	_, err = sub.Subscribe(t.Context(), e.topic)
	require.ErrorContains(t, err, "other arguments")
	require.ErrorContains(t, err, "classic")
	_, err = sub.Subscribe(t.Context(), "amq.reserved")
	require.Error(t, err)
}
