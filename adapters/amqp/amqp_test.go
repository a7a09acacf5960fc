package amqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/testamqp"
	"github.com/surely-dev/surely/retry"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// A consumer process of the crash test: no tests, no leak check
		// (it is SIGKILLed).
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

const (
	deadTopic   = "dead"
	handlerName = "orders-handler"
)

type env struct {
	url   string
	admin *amqp.Connection
	topic string
	pub   *surelyamqp.Publisher
	store idempotency.Store
	dead  *faults.Publisher
	rec   *recorder
}

func randomName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// setup names a queue for the test (deleted when the test ends, after
// everything else set up later was closed), and makes a publisher and an
// admin connection for the test's own checks.
func setup(t *testing.T) *env {
	t.Helper()
	url := testamqp.URL(t)
	e := &env{
		url:   url,
		topic: "surely_test_" + randomName(t) + ".orders",
		dead:  faults.NewPublisher(0),
		rec:   &recorder{},
	}
	var err error
	e.admin, err = amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.admin.Close() })
	e.deleteAtEnd(t, e.topic)
	e.pub, err = surelyamqp.NewPublisher(url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.pub.Close()) })
	e.store, err = memstore.New()
	require.NoError(t, err)
	return e
}

// deleteAtEnd deletes queue when the test ends (a missing queue is fine).
func (e *env) deleteAtEnd(t *testing.T, queue string) {
	t.Helper()
	t.Cleanup(func() {
		ch, err := e.admin.Channel()
		if err != nil {
			t.Errorf("delete queue %s: %v", queue, err)
			return
		}
		defer func() { _ = ch.Close() }()
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", queue, err)
		}
	})
}

// channel opens a channel on the admin connection, closed at the end.
func (e *env) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	ch, err := e.admin.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// ready returns the number of messages ready for delivery in queue.
func (e *env) ready(t *testing.T, queue string) int {
	t.Helper()
	ch, err := e.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// publish publishes one message with an operation key.
func (e *env) publish(t *testing.T, key, payload string) *message.Message {
	t.Helper()
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	require.NoError(t, e.pub.Publish(e.topic, msg))
	return msg
}

// publishRaw publishes a message the way another client would.
func (e *env) publishRaw(t *testing.T, p amqp.Publishing) {
	t.Helper()
	ch := e.channel(t)
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", e.topic, false, false, p)
	require.NoError(t, err)
	ok, err := dc.WaitContext(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
}

// chain is handler.New over memstore with the faults publisher as dead
// letter; opts come last and win.
func (e *env) chain(t *testing.T, fn message.HandlerFunc, opts ...handler.Option) message.NoPublishHandlerFunc {
	t.Helper()
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
		retry.WithBackoff(time.Millisecond, 2*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	require.NoError(t, err)
	base := []handler.Option{
		handler.WithStore(e.store, "orders"),
		handler.WithDeadLetter(e.dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(5 * time.Second),
	}
	h, err := handler.New(fn, append(base, opts...)...)
	require.NoError(t, err)
	return handler.NoPublish(h)
}

// consume runs a router with one consumer handler on a new Subscriber.
// The recorder sees every delivery before surely's chain. The returned
// stop closes the subscriber, then the router; it also runs when the test
// ends (again harmlessly).
func (e *env) consume(t *testing.T, opts []delivery.Option, h message.NoPublishHandlerFunc) (*surelyamqp.Subscriber, func()) {
	t.Helper()
	sub, err := surelyamqp.NewSubscriber(e.url, opts...)
	require.NoError(t, err)
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	r.AddMiddleware(e.rec.middleware)
	r.AddConsumerHandler(handlerName, e.topic, sub, h)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			require.NoError(t, sub.Close())
			require.NoError(t, r.Close())
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return sub, stop
}

func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatal("nothing received in 15s")
		panic("unreachable")
	}
}

// seen is one delivery as the router handed it to the handler chain.
type seen struct {
	at           time.Time
	uuid         string
	payload      string
	metadata     message.Metadata
	info         delivery.Info
	hasInfo      bool
	hasControl   bool
	handler      string
	topic        string
	chainErr     error
	decodeMarked bool
}

// recorder is a router middleware that records every delivery.
type recorder struct {
	mu   sync.Mutex
	seen []seen
}

func (r *recorder) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		s := seen{at: time.Now(), uuid: msg.UUID, payload: string(msg.Payload), metadata: maps.Clone(msg.Metadata),
			handler: message.HandlerNameFromCtx(ctx), topic: message.SubscribeTopicFromCtx(ctx)}
		s.info, s.hasInfo = delivery.InfoFrom(ctx)
		_, s.hasControl = delivery.ControlFrom(ctx)
		_, s.decodeMarked = delivery.DecodeError(msg)
		msgs, err := h(msg)
		s.chainErr = err
		r.mu.Lock()
		r.seen = append(r.seen, s)
		r.mu.Unlock()
		return msgs, err
	}
}

func (r *recorder) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.seen...)
}
