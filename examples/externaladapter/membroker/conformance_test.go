package membroker_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"

	"example.com/externaladapter/membroker"
)

func TestMain(m *testing.M) {
	// No adaptertest.RunChild: an in-memory broker does not outlive its
	// process, so the crash test, which needs one, is skipped
	// (Features.NoCrashRecovery). A broker that does calls it here first.
	goleak.VerifyTestMain(m)
}

// The broker's ack deadline and its subscribers' close timeout in the
// suite.
const (
	ackWait      = time.Second
	closeTimeout = 2 * time.Second
)

// adapter serves the suite from one broker for the whole run: every test
// has topics and consumer groups of its own.
type adapter struct{ b *membroker.Broker }

func (a adapter) NewTopic(*testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "orders-" + hex.EncodeToString(b) // a broker topic lives as long as the broker
}

func (a adapter) NewPublisher(*testing.T) message.Publisher { return membroker.NewPublisher(a.b) }

func (a adapter) NewSubscriber(_ *testing.T, group string) message.Subscriber {
	return membroker.NewSubscriber(a.b, group)
}

func (a adapter) PublishMalformed(_ *testing.T, topic string) []byte {
	raw := []byte("not a message")
	a.b.PublishRaw(topic, raw)
	return raw
}

func (a adapter) ChildEnv() []string { return nil } // no crash test

func TestConformance(t *testing.T) {
	a := adapter{b: membroker.New(ackWait, closeTimeout)}
	adaptertest.Run(t, func(*testing.T) adaptertest.Adapter { return a }, adaptertest.Features{
		DeliveryCount:   true, // the broker counts a message's deliveries to its group
		NackDelay:       true, // a nack after NackAfter(d) holds the message back for d
		LeaseExtension:  true, // Extend pushes the ack deadline back
		NoCrashRecovery: true, // in memory: gone with the process
		AckWait:         ackWait,
		CloseTimeout:    closeTimeout,
		// The defaults, spelled out: each in-process test on a memstore
		// of its own (no server). Features.SharedStore would be the crash
		// test's store, shared with its child processes.
		NewStore: adaptertest.NewMemStore,
		PubSub: &tests.Features{
			ConsumerGroups:      true,
			ExactlyOnceDelivery: false,
			// A group's subscribers compete, and a nacked message goes
			// back ahead of the later ones: no order across subscribers.
			GuaranteedOrder: false,
			Persistent:      true,
		},
		PubSubSkip: map[string]string{
			"TestMessageCtx": "Close drains: it waits up to the close timeout for the messages in flight before it cancels their contexts (Watermill's test expects at once), as surely's adapters do",
		},
	})
}
