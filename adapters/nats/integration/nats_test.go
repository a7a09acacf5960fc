// Package integration_test holds the tests of adapters/nats that need a
// NATS server, embedded (nats-server, through internal/testbroker) or
// external, and the conformance suite (adapters/adaptertest, which links a
// SQLite driver). They live apart from the adapter because "go mod tidy" in
// a module that imports adapters/nats loads the adapter's own tests and
// records every module they import in that module's go.sum; nothing imports
// this package, so tidy never loads it. internal/tidycheck checks it.
package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/testbroker"
	"github.com/surely-dev/surely/retry"
)

func TestMain(m *testing.M) {
	adaptertest.RunChild(newChildSubscriber) // the conformance suite's crash-test children
	goleak.VerifyTestMain(m)
}

const (
	deadTopic   = "dead"
	handlerName = "orders-handler"
)

// eachServer runs f against an embedded server and, when SURELY_NATS_URL is
// set (required under SURELY_REQUIRE_SERVICES=1), against that server.
func eachServer(t *testing.T, f func(t *testing.T, url string)) {
	t.Helper()
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		f(t, testbroker.EmbeddedNATS(t))
	})
	t.Run("external", func(t *testing.T) {
		t.Parallel()
		f(t, testbroker.NATS(t))
	})
}

type env struct {
	url      string
	admin    *nats.Conn
	js       jetstream.JetStream
	stream   string
	topic    string
	consumer string
	pub      *surelynats.Publisher
	store    idempotency.Store
	dead     *faults.Publisher
	rec      *recorder
}

func randomName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// setup creates a uniquely named stream on the server at url (deleted,
// with its consumers, when the test ends) and a publisher.
func setup(t *testing.T, url string) *env {
	t.Helper()
	id := randomName(t)
	e := &env{
		url:      url,
		stream:   "surely_test_" + id,
		topic:    "surely.test." + id + ".orders",
		consumer: "c" + id,
		dead:     faults.NewPublisher(0),
		rec:      &recorder{},
	}
	var err error
	e.admin, err = nats.Connect(url)
	require.NoError(t, err)
	e.js, err = jetstream.New(e.admin)
	require.NoError(t, err)
	require.NoError(t, ensureStream(t, e.admin, jetstream.StreamConfig{Name: e.stream, Subjects: []string{e.topic}}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.js.DeleteStream(ctx, e.stream); err != nil {
			t.Errorf("delete stream %s: %v", e.stream, err)
		}
		e.admin.Close()
	})
	e.pub, err = surelynats.NewPublisher(url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.pub.Close()) })
	e.store, err = memstore.New()
	require.NoError(t, err)
	return e
}

// errStreamCreate is JetStream's "error creating store for stream".
const errStreamCreate jetstream.ErrorCode = 10049

// ensureStream is EnsureStream, tried again when the server fails to
// create the stream's directory: nats-server 2.9 (the shared test server)
// sometimes does while other streams of the account are deleted at the
// same time (seen: "mkdir .../$G/streams/<name>: no such file or directory").
func ensureStream(t *testing.T, nc *nats.Conn, cfg jetstream.StreamConfig) error {
	t.Helper()
	for i := 0; ; i++ {
		err := surelynats.EnsureStream(t.Context(), nc, cfg)
		var apiErr *jetstream.APIError
		if i == 4 || !errors.As(err, &apiErr) || apiErr.ErrorCode != errStreamCreate {
			return err
		}
		t.Logf("create stream %s: %v; trying again", cfg.Name, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// publish publishes one message with an operation key.
func (e *env) publish(t *testing.T, key, payload string) *message.Message {
	t.Helper()
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	require.NoError(t, e.pub.Publish(e.topic, msg))
	return msg
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
// The recorder sees every delivery before surely's chain. At the end of
// the test the subscriber is closed first, then the router.
func (e *env) consume(t *testing.T, opts []delivery.Option, h message.NoPublishHandlerFunc) *surelynats.Subscriber {
	t.Helper()
	sub, err := surelynats.NewSubscriber(e.url, e.consumer, opts...)
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
	t.Cleanup(func() {
		require.NoError(t, sub.Close())
		require.NoError(t, r.Close())
		require.NoError(t, <-done)
	})
	return sub
}

// consumerInfo returns the server's view of the test's consumer.
func (e *env) consumerInfo(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, e.stream, surelynats.ConsumerName(e.consumer, e.topic))
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	return info
}

// seen is one delivery as the router handed it to the handler chain.
type seen struct {
	at           time.Time
	uuid         string
	payload      string
	info         delivery.Info
	hasInfo      bool
	hasControl   bool
	handler      string
	topic        string
	chainTook    time.Duration
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
		s := seen{at: time.Now(), uuid: msg.UUID, payload: string(msg.Payload),
			handler: message.HandlerNameFromCtx(ctx), topic: message.SubscribeTopicFromCtx(ctx)}
		s.info, s.hasInfo = delivery.InfoFrom(ctx)
		_, s.hasControl = delivery.ControlFrom(ctx)
		_, s.decodeMarked = delivery.DecodeError(msg)
		msgs, err := h(msg)
		s.chainTook, s.chainErr = time.Since(s.at), err
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

func (r *recorder) count() int { return len(r.all()) }
