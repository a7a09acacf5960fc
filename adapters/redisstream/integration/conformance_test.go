// Package integration_test runs the conformance suite (adapters/adaptertest)
// on adapters/redisstream. It lives apart from the adapter's own tests
// because the suite links a SQLite driver for its default shared store: "go
// mod tidy" in a module that imports adapters/redisstream loads the
// adapter's tests and records every module they import in that module's
// go.sum, but never loads this package (nothing imports it).
// internal/tidycheck checks it.
package integration_test

import (
	"os"
	"testing"
	"time"

	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelyredis "github.com/surely-dev/surely/adapters/redisstream"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/testenv"
)

// childURLEnv carries the broker's URL to the crash test's child processes.
const childURLEnv = "SURELY_ADAPTERTEST_REDISSTREAM_URL"

// conformanceIdle is the subscribers' ack wait in the conformance suite.
const conformanceIdle = time.Second

func TestMain(m *testing.M) {
	adaptertest.RunChild(func(group string) (message.Subscriber, error) {
		opts, err := testenv.UniversalOptions(os.Getenv(childURLEnv))
		if err != nil {
			return nil, err
		}
		return surelyredis.NewSubscriber(opts, group, delivery.WithAckWait(conformanceIdle))
	})
	goleak.VerifyTestMain(m)
}

// server is the shared Redis of SURELY_REDIS_URL: its options and an admin
// client (closed when the test ends).
type server struct {
	url   string
	opts  *redis.UniversalOptions
	admin *redis.Client
}

func redisServer(t *testing.T) server {
	t.Helper()
	admin := testenv.Redis(t)
	url := testenv.URL(t, "SURELY_REDIS_URL")
	opts, err := testenv.UniversalOptions(url)
	require.NoError(t, err)
	return server{url: url, opts: opts, admin: admin}
}

// newStream returns a stream name of the test's own; every key starting
// with it is deleted when the test ends (SCAN + DEL, never FLUSH).
func (s server) newStream(t *testing.T) string {
	t.Helper()
	return testenv.RedisStream(t, s.admin)
}

// conformanceAdapter serves the suite on the shared Redis.
type conformanceAdapter struct{ srv server }

func (a conformanceAdapter) NewTopic(t *testing.T) string { return a.srv.newStream(t) }

func (a conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	pub, err := surelyredis.NewPublisher(a.srv.opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// conformanceCloseTimeout is the close timeout of the suite's subscribers
// (Features.CloseTimeout).
const conformanceCloseTimeout = 2 * time.Second

func (a conformanceAdapter) NewSubscriber(t *testing.T, group string) message.Subscriber {
	sub, err := surelyredis.NewSubscriber(a.srv.opts, group, delivery.WithAckWait(conformanceIdle),
		delivery.WithCloseTimeout(conformanceCloseTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// PublishMalformed adds an entry whose metadata field is not msgpack.
func (a conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	payload := "raw \x00 bytes"
	err := a.srv.admin.XAdd(t.Context(), &redis.XAddArgs{Stream: topic, Values: map[string]any{
		wmredis.UUIDHeaderKey: "malformed-1", "payload": payload, "metadata": "\xc1 not msgpack",
	}}).Err()
	require.NoError(t, err)
	return []byte(payload)
}

func (a conformanceAdapter) ChildEnv() []string { return []string{childURLEnv + "=" + a.srv.url} }

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T) adaptertest.Adapter { return conformanceAdapter{srv: redisServer(t)} },
		adaptertest.Features{
			DeliveryCount:  true,
			NackDelay:      true,
			LeaseExtension: true,
			AckWait:        conformanceIdle,
			CloseTimeout:   conformanceCloseTimeout,
			PubSub: &tests.Features{
				ConsumerGroups: true,
				Persistent:     true,
				// The full sizes take over 30s here: TestContinueAfterErrors
				// nacks 300 times, each resent after NackResendSleep.
				ForceShort: true,
			},
			PubSubSkip: map[string]string{
				"TestMessageCtx": "Subscriber.Close drains: it waits up to the close timeout for the messages in flight " +
					"to be acked or nacked before it cancels their contexts; Watermill expects them cancelled at once",
			},
		})
}
