// Package integration_test holds the tests of adapters/sqs that run on the
// in-process SQS emulator (internal/sqsemu, over goaws), and the conformance
// suite (adapters/adaptertest, which links a SQLite driver). They live apart
// from the adapter because "go mod tidy" in a module that imports
// adapters/sqs loads the adapter's own tests and records every module they
// import in that module's go.sum; nothing imports this package, so tidy
// never loads it. internal/tidycheck checks it.
package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelysqs "github.com/surely-dev/surely/adapters/sqs"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/sqsemu"
)

// childEndpointEnv carries the emulator's endpoint to the crash test's
// child processes.
const childEndpointEnv = "SURELY_ADAPTERTEST_SQS_ENDPOINT"

// conformanceVisibility is the subscribers' visibility timeout (WithAckWait) in the suite
// (SQS counts it in whole seconds).
const conformanceVisibility = time.Second

// loadMessages sizes the load test: the emulator, goaws behind a
// translating layer, publishes about 35 messages/s under -race while two
// consumers poll it (200/s without), so 2,000 would take a minute.
const loadMessages = 500

// emu is the process's emulator (goaws keeps global state: one per process).
var emu *sqsemu.Server

func TestMain(m *testing.M) {
	adaptertest.RunChild(func(string) (message.Subscriber, error) {
		return surelysqs.NewSubscriber(sqsemu.AWSConfig(), subscriberOptions(os.Getenv(childEndpointEnv))...)
	})
	var err error
	if emu, err = sqsemu.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "sqs emulator:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = emu.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// subscriberOptions returns the options of a test subscriber on the
// emulator at endpoint, then more, which override them.
// conformanceCloseTimeout is the close timeout of the suite's subscribers
// (Features.CloseTimeout).
const conformanceCloseTimeout = 2 * time.Second

func subscriberOptions(endpoint string, more ...delivery.Option) []delivery.Option {
	return append([]delivery.Option{
		surelysqs.WithClientOptions(sqsemu.ClientOptions(endpoint)...),
		delivery.WithAckWait(conformanceVisibility),
		surelysqs.WithWaitTime(time.Second), // Close is quick either way; this keeps idle receivers cheap
	}, more...)
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, newConformanceAdapter, adaptertest.Features{
		DeliveryCount:  true, // ApproximateReceiveCount (counted by the emulator's layer; goaws says 1)
		NackDelay:      true, // ChangeMessageVisibility
		LeaseExtension: true, // ChangeMessageVisibility
		AckWait:        conformanceVisibility,
		CloseTimeout:   conformanceCloseTimeout,
		Messages:       loadMessages,
		PubSub: &tests.Features{
			ConsumerGroups:                   false, // a queue is one group
			Persistent:                       true,
			NewSubscriberReceivesOldMessages: false, // a received message goes to one consumer, not to every new one
			ForceShort:                       true,  // 5,000 messages through the emulator take minutes under -race
		},
		PubSubSkip: map[string]string{
			"TestMessageCtx": "Subscriber.Close drains: it waits up to its close timeout for the messages in flight " +
				"to be acked or nacked before it cancels their contexts; Watermill expects them cancelled at once",
		},
	})
}

func randomName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

type conformanceAdapter struct {
	admin *awssqs.Client
	// queues created for topics derived from NewTopic's (Watermill's tests).
	mu      sync.Mutex
	created map[string]bool
}

func newConformanceAdapter(*testing.T) adaptertest.Adapter { return newAdapter() }

func newAdapter() *conformanceAdapter {
	return &conformanceAdapter{
		admin:   awssqs.NewFromConfig(sqsemu.AWSConfig(), emu.ClientOptions()...),
		created: map[string]bool{},
	}
}

// NewTopic creates a queue of the test's own; it and every queue derived
// from it are deleted when the test ends.
func (a *conformanceAdapter) NewTopic(t *testing.T) string {
	topic := "surely_conformance_" + randomName(t)
	require.NoError(t, a.ensure(t.Context(), topic))
	t.Cleanup(func() {
		ctx := context.Background()
		out, err := a.admin.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(topic)})
		if err != nil {
			t.Errorf("list queues %s*: %v", topic, err)
			return
		}
		for _, u := range out.QueueUrls {
			if _, err := a.admin.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
				t.Errorf("delete queue %s: %v", u, err)
			}
		}
	})
	return topic
}

// ensure creates the queue topic once, with the suite's visibility timeout.
func (a *conformanceAdapter) ensure(ctx context.Context, topic string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.created[topic] {
		return nil
	}
	_, err := a.admin.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName:  aws.String(topic),
		Attributes: map[string]string{"VisibilityTimeout": fmt.Sprint(int(conformanceVisibility / time.Second))},
	})
	if err == nil {
		a.created[topic] = true
	}
	return err
}

func (a *conformanceAdapter) NewPublisher(t *testing.T) message.Publisher {
	return ensuringPublisher{Publisher: newPublisher(t), a: a}
}

// NewSubscriber returns a competing consumer of the topic's queue (a queue
// is one group: group is not needed, every test has its own topic).
func (a *conformanceAdapter) NewSubscriber(t *testing.T, _ string) message.Subscriber {
	return newSubscriber(t)
}

func newPublisher(t testing.TB) *surelysqs.Publisher {
	p, err := surelysqs.NewPublisher(sqsemu.AWSConfig(), surelysqs.WithClientOptions(emu.ClientOptions()...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newSubscriber(t testing.TB) *surelysqs.Subscriber {
	s, err := surelysqs.NewSubscriber(sqsemu.AWSConfig(), subscriberOptions(emu.URL(), delivery.WithCloseTimeout(conformanceCloseTimeout))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ensuringPublisher creates, on first use, the queues of topics that
// Watermill's universal tests derive and publish to before subscribing
// (the adapter's Publisher never creates queues).
type ensuringPublisher struct {
	message.Publisher
	a *conformanceAdapter
}

func (p ensuringPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.a.ensure(context.Background(), topic); err != nil {
		return err
	}
	return p.Publisher.Publish(topic, msgs...)
}

// PublishMalformed sends a message whose UUID attribute is binary, which
// watermill-aws' default unmarshaler would crash on.
func (a *conformanceAdapter) PublishMalformed(t *testing.T, topic string) []byte {
	body := "raw malformed body <&> ü"
	url, err := a.admin.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	require.NoError(t, err)
	_, err = a.admin.SendMessage(t.Context(), &awssqs.SendMessageInput{
		QueueUrl: url.QueueUrl, MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"_watermill_message_uuid": {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3}},
			"idempotency_key":         {DataType: aws.String("String"), StringValue: aws.String("order-malformed")},
		},
	})
	require.NoError(t, err)
	return []byte(body)
}

func (a *conformanceAdapter) ChildEnv() []string { return []string{childEndpointEnv + "=" + emu.URL()} }
