package integration_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/sqs"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/sqsemu"
)

// actions counts the SQS actions a client sends, by X-Amz-Target.
type actions struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *actions) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.n[req.Header.Get("X-Amz-Target")]++
	a.mu.Unlock()
	return (&sqsemu.Transport{}).RoundTrip(req)
}

func (a *actions) count(action string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n["AmazonSQS."+action]
}

// counted returns client options for the emulator that count actions.
func counted() ([]func(*awssqs.Options), *actions) {
	a := &actions{n: map[string]int{}}
	opts := append(emu.ClientOptions(), func(o *awssqs.Options) { o.HTTPClient = &http.Client{Transport: a} })
	return opts, a
}

func TestPublisherResolvesTheQueueOnce(t *testing.T) {
	t.Parallel()
	a := newAdapter()
	topic := a.NewTopic(t)
	opts, n := counted()
	pub, err := sqs.NewPublisher(sqsemu.AWSConfig(), sqs.WithClientOptions(opts...))
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, pub.Publish(topic, message.NewMessage("m", []byte("x")), message.NewMessage("n", []byte("y"))))
	}
	require.Equal(t, 1, n.count("GetQueueUrl"))
	require.Equal(t, 6, n.count("SendMessage"))
	require.Zero(t, n.count("CreateQueue"))
}

func TestPublisherDoesNotCreateQueues(t *testing.T) {
	t.Parallel()
	opts, n := counted()
	pub, err := sqs.NewPublisher(sqsemu.AWSConfig(), sqs.WithClientOptions(opts...))
	require.NoError(t, err)
	topic := "surely_missing_" + randomName(t)
	require.Error(t, pub.Publish(topic, message.NewMessage("m", []byte("x"))))
	require.Zero(t, n.count("CreateQueue"))
	_, err = newAdapter().admin.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	require.Error(t, err, "the queue must not exist")
}

func TestSubscriberCreatesItsQueue(t *testing.T) {
	t.Parallel()
	a := newAdapter()
	base := a.NewTopic(t) // deletes the derived queue too
	topic := base + "-created"
	sub, err := sqs.NewSubscriber(sqsemu.AWSConfig(), sqs.WithClientOptions(emu.ClientOptions()...),
		delivery.WithAckWait(7*time.Second), sqs.WithWaitTime(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.SubscribeInitialize(topic))
	url, err := a.admin.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	require.NoError(t, err)
	attrs, err := a.admin.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl})
	require.NoError(t, err)
	require.Equal(t, "7", attrs.Attributes["VisibilityTimeout"])
}

// TestDeliveryFacts checks the facts and controls a handler gets, on the
// emulator: the count, a nack with a delay, an extension past the
// visibility timeout.
func TestDeliveryFacts(t *testing.T) {
	t.Parallel()
	a := newAdapter()
	topic := a.NewTopic(t)
	pub := newPublisher(t)
	sub := newSubscriber(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, message.NewMessage("u-1", []byte("p"))))

	next := func() (*message.Message, delivery.Info, delivery.Control) {
		t.Helper()
		select {
		case m := <-msgs:
			info, ok := delivery.InfoFrom(m.Context())
			require.True(t, ok)
			c, ok := delivery.ControlFrom(m.Context())
			require.True(t, ok)
			return m, info, c
		case <-time.After(15 * time.Second):
			t.Fatal("no message")
			return nil, delivery.Info{}, nil
		}
	}

	m, info, c := next()
	require.Equal(t, "u-1", m.UUID)
	require.Equal(t, delivery.Info{Count: 1}, info)
	require.True(t, c.NackAfter(1500*time.Millisecond))
	nacked := time.Now()
	m.Nack()

	m, info, c = next()
	require.GreaterOrEqual(t, time.Since(nacked), 1400*time.Millisecond, "held back for the delay (2s, rounded up)")
	require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, info)
	// Held past three visibility timeouts by extensions: not redelivered.
	for range 6 {
		require.NoError(t, c.Extend(t.Context()))
		time.Sleep(conformanceVisibility / 2)
	}
	select {
	case again := <-msgs:
		t.Fatalf("redelivered while extended: %s", again.UUID)
	default:
	}
	m.Ack()
	require.ErrorContains(t, c.Extend(t.Context()), "already settled") // sqs.errSettled
}
