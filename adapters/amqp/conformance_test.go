package amqp_test

import (
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/internal/testbroker"
)

// conformanceAckWait only sizes the suite's waits: RabbitMQ has no ack
// wait (an unacked delivery stays with its consumer until the consumer's
// channel closes, or consumer_timeout passes), so a waiting period longer
// than this proves nothing more.
const conformanceAckWait = 500 * time.Millisecond

func TestConformance(t *testing.T) {
	adaptertest.Run(t, newConformanceAdapter, adaptertest.Features{
		DeliveryCount:  true,  // quorum queues' x-delivery-count
		NackDelay:      false, // AMQP 0-9-1 requeues at once
		LeaseExtension: false, // nothing to extend: no ack deadline
		AckWait:        conformanceAckWait,
	})
}

// newChildSubscriber builds the crash test's subscribers in a child
// process. A queue has one group of competing consumers: group is not
// needed (every test of the suite has its own topic).
func newChildSubscriber(string) (message.Subscriber, error) {
	return surelyamqp.NewSubscriber(os.Getenv("SURELY_AMQP_URL"), surelyamqp.Config{}, nil)
}

type conformanceAdapter struct {
	url   string
	admin *amqp.Connection
}

func newConformanceAdapter(t *testing.T) adaptertest.Adapter {
	url := testbroker.AMQP(t)
	admin, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	return &conformanceAdapter{url: url, admin: admin}
}

// NewTopic declares a queue of the test's own, deleted when the test ends.
func (a *conformanceAdapter) NewTopic(t *testing.T) string {
	topic := "surely_conformance_" + randomName(t)
	ch, err := a.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclare(topic, true, false, false, false, surelyamqp.QueueArguments())
	require.NoError(t, err)
	t.Cleanup(func() {
		ch, err := a.admin.Channel()
		if err != nil {
			t.Errorf("delete queue %s: %v", topic, err)
			return
		}
		defer func() { _ = ch.Close() }()
		if _, err := ch.QueueDelete(topic, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", topic, err)
		}
	})
	return topic
}

func (a *conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	p, err := surelyamqp.NewPublisher(a.url, surelyamqp.PublisherConfig{}, nil)
	require.NoError(t, err)
	return p
}

// NewSubscriber returns a competing consumer of the topic's queue; see
// newChildSubscriber for the group.
func (a *conformanceAdapter) NewSubscriber(t *testing.T, _ string) message.Subscriber {
	s, err := surelyamqp.NewSubscriber(a.url, surelyamqp.Config{}, nil)
	require.NoError(t, err)
	return s
}

// PublishMalformed publishes a message with a table in a header, which
// Watermill's string metadata cannot hold.
func (a *conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	body := []byte("raw \x00 malformed")
	ch, err := a.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", topic, false, false, amqp.Publishing{
		Body: body, DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"idempotency_key": "order-malformed", "nested": amqp.Table{"a": int32(1)}},
	})
	require.NoError(t, err)
	ok, err := dc.WaitContext(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	return body
}

func (a *conformanceAdapter) ChildEnv() []string { return []string{"SURELY_AMQP_URL=" + a.url} }
