package integration_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/testbroker"
)

// conformanceAckWait is the subscribers' AckWait in the conformance suite.
const conformanceAckWait = time.Second

// conformanceCloseTimeout is the close timeout of the suite's subscribers
// (Features.CloseTimeout).
const conformanceCloseTimeout = 2 * time.Second

// childURLEnv carries the server URL to the crash test's child processes.
const childURLEnv = "SURELY_ADAPTERTEST_NATS_URL"

// newChildSubscriber builds a crash-test child's subscriber (see TestMain).
func newChildSubscriber(group string) (message.Subscriber, error) {
	return surelynats.NewSubscriber(os.Getenv(childURLEnv), group, delivery.WithAckWait(conformanceAckWait))
}

var conformanceFeatures = adaptertest.Features{
	DeliveryCount:  true,
	NackDelay:      true,
	LeaseExtension: true,
	AckWait:        conformanceAckWait,
	CloseTimeout:   conformanceCloseTimeout,
	PubSub: &tests.Features{
		ConsumerGroups: true,
		Persistent:     true,
		// The full sizes (10,000 messages through one consumer with
		// MaxAckPending 1) take minutes.
		ForceShort: true,
	},
	PubSubSkip: map[string]string{
		"TestMessageCtx": "Subscriber.Close drains: it waits up to the close timeout for the messages in flight " +
			"to be acked or nacked before it cancels their contexts; Watermill expects them cancelled at once",
	},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		url := testbroker.EmbeddedNATS(t)
		adaptertest.Run(t, func(t *testing.T) adaptertest.Adapter { return newConformanceAdapter(t, url) }, conformanceFeatures)
	})
	t.Run("external", func(t *testing.T) {
		t.Parallel()
		url := testbroker.NATS(t)
		adaptertest.Run(t, func(t *testing.T) adaptertest.Adapter { return newConformanceAdapter(t, url) }, conformanceFeatures)
	})
}

// conformanceAdapter serves the suite. Every topic gets a stream of its
// own, created on first use (Watermill's universal tests publish one
// message UUID to several topics: in one stream, JetStream's duplicate
// window would drop all but the first), and deleted when the test ends.
type conformanceAdapter struct {
	t     *testing.T
	url   string
	admin *nats.Conn
	js    jetstream.JetStream

	mu     sync.Mutex
	topics map[string]bool
}

func newConformanceAdapter(t *testing.T, url string) adaptertest.Adapter {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &conformanceAdapter{t: t, url: url, admin: nc, js: js, topics: map[string]bool{}}
}

// ensureTopic creates the stream of topic unless this adapter did already.
func (a *conformanceAdapter) ensureTopic(topic string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.topics[topic] {
		return nil
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(topic))
	stream := fmt.Sprintf("surely_at_%016x", h.Sum64())
	if err := ensureStream(a.t, a.admin, jetstream.StreamConfig{Name: stream, Subjects: []string{topic}}); err != nil {
		return err
	}
	a.topics[topic] = true
	a.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Another adapter of the same test may have deleted it already.
		if err := a.js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			a.t.Errorf("delete stream %s: %v", stream, err)
		}
	})
	return nil
}

func (a *conformanceAdapter) NewTopic(t *testing.T) string {
	topic := "surely.at." + randomName(t)
	require.NoError(t, a.ensureTopic(topic))
	return topic
}

func (a *conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	pub, err := surelynats.NewPublisher(a.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return ensuringPublisher{Publisher: pub, a: a}
}

func (a *conformanceAdapter) NewSubscriber(t *testing.T, group string) message.Subscriber {
	sub, err := surelynats.NewSubscriber(a.url, group, delivery.WithAckWait(conformanceAckWait),
		delivery.WithCloseTimeout(conformanceCloseTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return ensuringSubscriber{Subscriber: sub, a: a}
}

// ensuringPublisher and ensuringSubscriber create a topic's stream on
// first use, for the topics Watermill's universal tests derive.
type ensuringPublisher struct {
	message.Publisher
	a *conformanceAdapter
}

func (p ensuringPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.a.ensureTopic(topic); err != nil {
		return err
	}
	return p.Publisher.Publish(topic, msgs...)
}

type ensuringSubscriber struct {
	*surelynats.Subscriber
	a *conformanceAdapter
}

func (s ensuringSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.a.ensureTopic(topic); err != nil {
		return nil, err
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

func (s ensuringSubscriber) SubscribeInitialize(topic string) error {
	if err := s.a.ensureTopic(topic); err != nil {
		return err
	}
	return s.Subscriber.SubscribeInitialize(topic)
}

// PublishMalformed publishes a message with two values for one header,
// which Watermill's NATSMarshaler cannot decode.
func (a *conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	bad := nats.NewMsg(topic)
	bad.Header.Add("k", "a")
	bad.Header.Add("k", "b")
	bad.Data = []byte("raw \x00 bytes")
	_, err := a.js.PublishMsg(t.Context(), bad)
	require.NoError(t, err)
	return bad.Data
}

func (a *conformanceAdapter) ChildEnv() []string { return []string{childURLEnv + "=" + a.url} }
