package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelykafka "github.com/surely-dev/surely/adapters/kafka"
	"github.com/surely-dev/surely/delivery"
)

// receive waits for the next message of ch.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "channel closed")
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
		return nil
	}
}

func onePartitionTopic(t *testing.T, brokers []string, name string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	require.NoError(t, err)
	defer func() { _ = admin.Close() }()
	require.NoError(t, surelykafka.EnsureTopic(admin, name, sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}))
	require.NoError(t, surelykafka.EnsureTopic(admin, name, sarama.TopicDetail{NumPartitions: 7, ReplicationFactor: 1}),
		"an existing topic is left as it is")
}

// TestOffsetsFollowAcks: a group resumes after the last acked message of a
// partition; a message handed out but never acked is not committed; a
// message acked while Close waits for it is.
func TestOffsetsFollowAcks(t *testing.T) {
	t.Parallel()
	brokers := startKafka(t)
	const topic = "offsets"
	onePartitionTopic(t, brokers, topic)
	pub, err := surelykafka.NewPublisher(brokers)
	require.NoError(t, err)
	defer func() { require.NoError(t, pub.Close()) }()
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		require.NoError(t, pub.Publish(topic, message.NewMessage(id, []byte(id))))
	}
	newSub := func() (*surelykafka.Subscriber, <-chan *message.Message) {
		sub, err := surelykafka.NewSubscriber(brokers, "billing",
			surelykafka.WithSaramaConfig(fastGroupConfig), delivery.WithCloseTimeout(500*time.Millisecond))
		require.NoError(t, err)
		ch, err := sub.Subscribe(context.Background(), topic)
		require.NoError(t, err)
		return sub, ch
	}

	// First consumer: acks m1, leaves m2 unacked and closes.
	sub, ch := newSub()
	m1 := receive(t, ch)
	require.Equal(t, "m1", m1.UUID)
	part, pok := wmkafka.MessagePartitionFromCtx(m1.Context())
	off, ook := wmkafka.MessagePartitionOffsetFromCtx(m1.Context())
	require.True(t, pok && ook, "the record's position is in the message context")
	require.Zero(t, part)
	require.Zero(t, off)
	m1.Ack()
	m2 := receive(t, ch)
	require.Equal(t, "m2", m2.UUID)
	start := time.Now()
	require.NoError(t, sub.Close())
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "Close waited for the message in flight")
	select {
	case <-m2.Context().Done():
	default:
		t.Fatal("the abandoned message's context must be cancelled")
	}

	// Second consumer of the group: m2 again (never acked), not m1. It acks
	// m2 while Close waits for it.
	sub, ch = newSub()
	m2 = receive(t, ch)
	require.Equal(t, "m2", m2.UUID, "an unacked message is not committed")
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-m2.Context().Done():
		t.Fatal("Close cancelled a message in flight before its close timeout")
	default:
	}
	m2.Ack()
	require.NoError(t, <-closed)

	// Third: m3.
	sub, ch = newSub()
	m3 := receive(t, ch)
	require.Equal(t, "m3", m3.UUID, "the message acked during Close was committed")
	m3.Ack()
	require.NoError(t, sub.Close())
}
