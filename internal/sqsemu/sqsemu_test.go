package sqsemu_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/internal/sqsemu"
)

var srv *sqsemu.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = sqsemu.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setup(t *testing.T) (*awssqs.Client, string) {
	t.Helper()
	client := awssqs.NewFromConfig(sqsemu.AWSConfig(), srv.ClientOptions()...)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "sqsemu_" + hex.EncodeToString(b)
	out, err := client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{
		QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": "1"},
	})
	require.NoError(t, err)
	require.NotEmpty(t, aws.ToString(out.QueueUrl))
	t.Cleanup(func() {
		_, err := client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
		require.NoError(t, err)
	})
	return client, aws.ToString(out.QueueUrl)
}

func receive(t *testing.T, c *awssqs.Client, url string, wait int32) []types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: wait,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	require.NoError(t, err)
	return out.Messages
}

func TestStartRefusesASecondServer(t *testing.T) {
	_, err := sqsemu.Start()
	require.Error(t, err)
	require.Equal(t, "127.0.0.1", srv.URL()[len("http://"):len("http://127.0.0.1")], "loopback only")
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c, url := setup(t)

	got, err := c.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(url[len(url)-len("sqsemu_")-12:])})
	require.NoError(t, err)
	require.Equal(t, url, aws.ToString(got.QueueUrl))

	_, err = c.SendMessage(t.Context(), &awssqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(`{"a": "<b>&"}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"s": {DataType: aws.String("String"), StringValue: aws.String("x y")},
			"b": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
		},
	})
	require.NoError(t, err)

	msgs := receive(t, c, url, 1)
	require.Len(t, msgs, 1)
	m := msgs[0]
	require.Equal(t, `{"a": "<b>&"}`, aws.ToString(m.Body))
	require.Equal(t, "x y", aws.ToString(m.MessageAttributes["s"].StringValue))
	require.Equal(t, []byte{0, 1, 2}, m.MessageAttributes["b"].BinaryValue)
	require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"])

	// Visible again at once: the count grows.
	_, err = c.ChangeMessageVisibility(t.Context(), &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
	})
	require.NoError(t, err)
	msgs = receive(t, c, url, 1)
	require.Len(t, msgs, 1)
	require.Equal(t, "2", msgs[0].Attributes["ApproximateReceiveCount"])

	_, err = c.DeleteMessage(t.Context(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: msgs[0].ReceiptHandle})
	require.NoError(t, err)
	// Long polling returns empty after the wait.
	start := time.Now()
	require.Empty(t, receive(t, c, url, 1))
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
}

func TestVisibilityTimeoutExpires(t *testing.T) {
	t.Parallel()
	c, url := setup(t)
	_, err := c.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m")})
	require.NoError(t, err)
	require.Len(t, receive(t, c, url, 1), 1)
	// Not acked: back after the queue's 1s visibility timeout.
	var again []types.Message
	for range 5 {
		if again = receive(t, c, url, 1); len(again) > 0 {
			break
		}
	}
	require.Len(t, again, 1)
	require.Equal(t, "2", again[0].Attributes["ApproximateReceiveCount"])
}

func TestReceiveVisibilityTimeoutApplies(t *testing.T) {
	t.Parallel()
	c, url := setup(t)
	_, err := c.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m")})
	require.NoError(t, err)
	out, err := c.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), VisibilityTimeout: 5})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	// The queue's own timeout (1s) would have brought it back within 2s.
	require.Empty(t, receive(t, c, url, 2))
}

func TestErrors(t *testing.T) {
	t.Parallel()
	c := awssqs.NewFromConfig(sqsemu.AWSConfig(), srv.ClientOptions()...)
	_, err := c.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String("sqsemu_missing")})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing)

	_, url := setup(t)
	_, err = c.ChangeMessageVisibility(t.Context(), &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: aws.String("nope"), VisibilityTimeout: 3,
	})
	var notInFlight *types.MessageNotInflight
	require.ErrorAs(t, err, &notInFlight)

	_, err = c.TagQueue(t.Context(), &awssqs.TagQueueInput{QueueUrl: aws.String(url), Tags: map[string]string{"a": "b"}})
	var api smithy.APIError
	require.True(t, errors.As(err, &api), "%v", err)
	require.Equal(t, "UnsupportedOperation", api.ErrorCode())
}

func BenchmarkSendMessage(b *testing.B) {
	c := awssqs.NewFromConfig(sqsemu.AWSConfig(), srv.ClientOptions()...)
	out, err := c.CreateQueue(b.Context(), &awssqs.CreateQueueInput{QueueName: aws.String("sqsemu_bench_send")})
	require.NoError(b, err)
	b.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	for b.Loop() {
		_, err := c.SendMessage(b.Context(), &awssqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String("m")})
		require.NoError(b, err)
	}
}
