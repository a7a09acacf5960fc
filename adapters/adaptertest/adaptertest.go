package adaptertest

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/surely-dev/surely/idempotency"
)

// Adapter is what the suite needs from a broker adapter. newAdapter (given
// to Run) builds one per test; it may skip the test (t.Skip) when its
// server is missing.
//
// The suite closes every publisher and subscriber it gets, a subscriber
// before the router that consumes it; Close may be called twice (the
// router closes its subscribers too). Everything else an Adapter creates
// (connections, streams, queues) it releases itself in t.Cleanup.
type Adapter interface {
	// NewTopic returns a topic of the test's own, ready to publish and
	// subscribe to (a NATS stream captures it, a queue exists), and
	// removed when t ends. With Features.PubSub, topics formed by
	// appending '-' and a suffix of letters, digits and '-' must work as
	// well, each on its own (Watermill's universal tests derive theirs
	// that way and publish one message UUID to several of them), and be
	// removed too.
	NewTopic(t *testing.T) string
	// NewPublisher returns a publisher with the adapter's safe defaults.
	NewPublisher(t *testing.T) message.Publisher
	// NewSubscriber returns a new subscriber, a consumer in consumer
	// group group: subscribers of one group share a topic's messages
	// (competing consumers), subscribers of different groups each get
	// all of them. An unacked delivery goes back to the group about
	// Features.AckWait after its consumer stopped extending it.
	NewSubscriber(t *testing.T, group string) message.Subscriber
	// PublishMalformed publishes to topic a message that the adapter's
	// subscriber cannot decode (wrong headers, a missing field), and
	// returns the bytes the dead letter's payload must hold. Not called
	// when Features.NoMalformed.
	PublishMalformed(t *testing.T, topic string) []byte
	// ChildEnv returns the environment (KEY=value) that a child process
	// needs to rebuild this adapter's subscribers with the function its
	// TestMain passes to RunChild (a server URL, credentials). Not called
	// when Features.NoCrashRecovery.
	ChildEnv() []string
}

// Features says what the broker and its adapter do, and sizes the tests.
// The zero value describes a networked broker without delivery count,
// broker-side nack delay or lease extension.
type Features struct {
	// DeliveryCount: delivery.InfoFrom reports the broker's delivery count
	// (1 on the first delivery, growing with each redelivery). Without it
	// the suite checks that the adapter does not make one up (Count 0).
	DeliveryCount bool
	// NackDelay: the adapter's delivery.Control.NackAfter returns true and
	// the broker holds the message back for the delay. Without it the
	// suite checks that NackAfter returns false (or that there is no
	// Control), and that the chain's own wait still spaces the redelivery.
	NackDelay bool
	// LeaseExtension: delivery.Control.Extend keeps a delivery whose
	// handler runs past AckWait from being redelivered. Without it the
	// suite checks only that the handler runs once (the store's lease
	// refuses the redelivery).
	LeaseExtension bool

	// NoCrashRecovery: unacked messages die with the consumer process
	// (GoChannel): the crash test is skipped.
	NoCrashRecovery bool
	// NoConsumerGroups: every subscriber of a topic gets every message
	// (GoChannel): the load test runs one consumer instead of two
	// competing ones, and the slow-handler test has no second consumer.
	NoConsumerGroups bool
	// NoMalformed: messages travel as Go values, never as bytes
	// (GoChannel): none can arrive undecodable, so the malformed-message
	// test is skipped and PublishMalformed is never called.
	NoMalformed bool

	// AckWait is how long the broker leaves a delivery to a consumer
	// before it may hand it to another one, as the adapter configures its
	// subscribers for the suite (NATS AckWait, Redis Streams MaxIdleTime,
	// SQS visibility timeout). Default 1s; keep it short: the slow-handler
	// test runs a handler for 3×AckWait and the crash test waits for it.
	AckWait time.Duration
	// CloseTimeout is the close timeout of the subscribers NewSubscriber
	// returns (delivery.WithCloseTimeout in surely's adapters): how long
	// their Close waits for a message in flight to be acked or nacked
	// before it gives up on it. Keep it short (a second or two): the
	// CloseTimeout test waits for it. Zero: the adapter's Close does not
	// wait for messages in flight (GoChannel), and the test is skipped.
	CloseTimeout time.Duration
	// Messages is the size of the load test (default 2,000). Lower it only
	// for a broker too slow for that under -race, and say why.
	Messages int

	// PubSub, when set, runs Watermill's universal tests.TestPubSub on the
	// adapter with these features too. The suite sets GenerateTopicFunc
	// (topics derived from one NewTopic); the subscriber without a group
	// of Watermill's tests is NewSubscriber with one fixed group.
	PubSub *tests.Features
	// PubSubSkip names Watermill tests (such as "TestMessageCtx") that the
	// adapter departs from on purpose, each with the reason; they are
	// skipped with it.
	PubSubSkip map[string]string

	// NewStore returns the idempotency store of one test that runs its
	// consumers in the test process (every test but the crash test). Each
	// call must return an empty store of the test's own: the tests reuse
	// operation keys. What it makes it releases in t.Cleanup. Default:
	// NewMemStore (idempotency/memstore), which needs no server.
	NewStore func(t testing.TB) idempotency.Store
	// SharedStore is the durable store that the crash test's parent and
	// child processes share. The children get theirs from RunChild: pass
	// the same SharedStore to both. Default (nil): SQLiteStore, a SQLite
	// file in the test's temporary directory, which needs no server.
	SharedStore *SharedStore
}

// Defaults of Features.
const (
	DefaultAckWait  = time.Second
	DefaultMessages = 2000
)

func (f Features) withDefaults() Features {
	if f.AckWait <= 0 {
		f.AckWait = DefaultAckWait
	}
	if f.Messages <= 0 {
		f.Messages = DefaultMessages
	}
	if f.NewStore == nil {
		f.NewStore = NewMemStore
	}
	return f
}

// NewChildSubscriber builds, in a child process of the crash test, a
// subscriber in consumer group group, configured from the environment that
// the parent's Adapter.ChildEnv returned (os.Getenv). It must behave like
// Adapter.NewSubscriber. The child closes it.
type NewChildSubscriber func(group string) (message.Subscriber, error)

// Run runs the conformance suite: every test calls newAdapter with its own
// t, in parallel with the others. See the package doc for the tests.
func Run(t *testing.T, newAdapter func(t *testing.T) Adapter, features Features) {
	t.Helper()
	f := features.withDefaults()
	for _, tc := range suiteTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newAdapter, f)
		})
	}
	if f.PubSub != nil {
		t.Run("WatermillPubSub", func(t *testing.T) {
			t.Parallel()
			runWatermill(t, newAdapter, f)
		})
	}
}
