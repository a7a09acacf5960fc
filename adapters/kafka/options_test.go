package kafka_test

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	surelykafka "github.com/surely-dev/surely/adapters/kafka"
)

func TestConfigValidation(t *testing.T) {
	brokers := []string{"127.0.0.1:1"} // never dialled by the constructors
	_, err := surelykafka.NewSubscriber(brokers, surelykafka.Config{}, nil)
	require.ErrorIs(t, err, surelykafka.ErrInvalidOption, "no consumer group")
	_, err = surelykafka.NewSubscriber(nil, surelykafka.Config{ConsumerGroup: "g"}, nil)
	require.ErrorIs(t, err, surelykafka.ErrInvalidOption, "no brokers")
	bad := surelykafka.DefaultSubscriberSaramaConfig()
	bad.Consumer.Group.Heartbeat.Interval = bad.Consumer.Group.Session.Timeout
	_, err = surelykafka.NewSubscriber(brokers, surelykafka.Config{ConsumerGroup: "g", Sarama: bad}, nil)
	require.ErrorIs(t, err, surelykafka.ErrInvalidOption, "Sarama's own validation")
	sub, err := surelykafka.NewSubscriber(brokers, surelykafka.Config{ConsumerGroup: "g"}, nil)
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	require.NoError(t, sub.Close(), "twice")

	_, err = surelykafka.NewPublisher(nil, surelykafka.PublisherConfig{}, nil)
	require.ErrorIs(t, err, surelykafka.ErrInvalidOption, "no brokers")
	leaderOnly := surelykafka.DefaultPublisherSaramaConfig()
	leaderOnly.Producer.Idempotent = false
	leaderOnly.Producer.RequiredAcks = sarama.WaitForLocal
	_, err = surelykafka.NewPublisher(brokers, surelykafka.PublisherConfig{Sarama: leaderOnly}, nil)
	require.ErrorIs(t, err, surelykafka.ErrInvalidOption, "acks from the leader only")
	noSuccesses := surelykafka.DefaultPublisherSaramaConfig()
	noSuccesses.Producer.Return.Successes = false
	_, err = surelykafka.NewPublisher(brokers, surelykafka.PublisherConfig{Sarama: noSuccesses}, nil)
	require.ErrorIs(t, err, surelykafka.ErrInvalidOption)
}

func TestDefaults(t *testing.T) {
	s := surelykafka.DefaultSubscriberSaramaConfig()
	require.Equal(t, sarama.OffsetOldest, s.Consumer.Offsets.Initial)
	require.True(t, s.Consumer.Offsets.AutoCommit.Enable)
	require.False(t, s.Metadata.AllowAutoTopicCreation)
	require.NoError(t, s.Validate())
	p := surelykafka.DefaultPublisherSaramaConfig()
	require.Equal(t, sarama.WaitForAll, p.Producer.RequiredAcks)
	require.True(t, p.Producer.Idempotent)
	require.False(t, p.Metadata.AllowAutoTopicCreation)
	require.NoError(t, p.Validate())
}
