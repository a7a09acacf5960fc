package integration_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/sqs"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/sqsemu"
)

// TestCloseDrains: Close lets a running handler finish and its ack delete
// the message, as the other adapters' Close does, instead of cancelling it
// and leaving the message to come back after its visibility timeout.
func TestCloseDrains(t *testing.T) {
	t.Parallel()
	a := newAdapter()
	topic := a.NewTopic(t)
	pub := newPublisher(t)
	opts, n := counted()
	sub, err := sqs.NewSubscriber(sqsemu.AWSConfig(), subscriberOptions(emu.URL(), sqs.WithClientOptions(opts...))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(t.Context(), topic)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, message.NewMessage("slow", []byte("p"))))

	var m *message.Message
	select {
	case m = <-msgs:
	case <-time.After(15 * time.Second):
		t.Fatal("no message")
	}
	// The handler is still running when Close is called.
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	for range msgs { // Close stops handing out messages: the channel closes
		t.Fatal("a message handed out after Close")
	}
	require.NoError(t, m.Context().Err(), "the running handler's context is not cancelled while Close drains")
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a handler was running", err)
	default:
	}
	require.True(t, m.Ack())
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return after the handler finished")
	}
	require.Equal(t, 1, n.count("DeleteMessage"), "the acked message is deleted, once")

	url, err := a.admin.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	require.NoError(t, err)
	attrs, err := a.admin.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	require.Equal(t, "0", attrs.Attributes["ApproximateNumberOfMessages"])
	require.Equal(t, "0", attrs.Attributes["ApproximateNumberOfMessagesNotVisible"], "nothing left to come back")
}

// TestCloseReleasesAMessageNotHandedOut: a message received but never handed
// out (nobody read the channel) is not lost by Close: it is visible again,
// at once when the Subscriber held it, else after its visibility timeout
// (a receive watermill-aws was still completing when Close began; see the
// package doc).
func TestCloseReleasesAMessageNotHandedOut(t *testing.T) {
	t.Parallel()
	a := newAdapter()
	topic := a.NewTopic(t)
	pub := newPublisher(t)
	sub, err := sqs.NewSubscriber(sqsemu.AWSConfig(), subscriberOptions(emu.URL(), delivery.WithAckWait(3*time.Second))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Subscribe(t.Context(), topic) // never read
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, message.NewMessage("held", []byte("p"))))

	url, err := a.admin.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	require.NoError(t, err)
	counts := func() (visible, hidden string) {
		attrs, err := a.admin.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		require.NoError(t, err)
		return attrs.Attributes["ApproximateNumberOfMessages"], attrs.Attributes["ApproximateNumberOfMessagesNotVisible"]
	}
	require.Eventually(t, func() bool { _, hidden := counts(); return hidden == "1" }, 15*time.Second, 10*time.Millisecond,
		"received by the subscriber")
	require.NoError(t, sub.Close())
	closed := time.Now()
	if _, hidden := counts(); hidden == "0" {
		t.Log("visible again at once after Close")
	}
	require.Eventually(t, func() bool {
		visible, hidden := counts() // goaws counts hidden messages in visible too
		return hidden == "0" && visible == "1"
	}, 30*time.Second, 10*time.Millisecond, "the message is visible again and still there: not lost")
	t.Logf("visible again %v after Close", time.Since(closed).Round(time.Millisecond))
}
