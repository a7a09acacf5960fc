// Package integration_test holds the tests of adapters/kafka that run on an
// in-process Kafka (franz-go's kfake), and the conformance suite
// (adapters/adaptertest, which links a SQLite driver). They live apart from
// the adapter because "go mod tidy" in a module that imports adapters/kafka
// loads the adapter's own tests and records every module they import in that
// module's go.sum; nothing imports this package, so tidy never loads it.
// internal/tidycheck checks it.
package integration_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelykafka "github.com/surely-dev/surely/adapters/kafka"
)

func TestMain(m *testing.M) {
	adaptertest.RunChild(newChildSubscriber) // the conformance suite's crash-test children
	goleak.VerifyTestMain(m,
		// Sarama's metrics (go-metrics) start one ticker goroutine per
		// process on first use and never stop it.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// brokersEnv carries the kfake cluster's addresses to the crash test's
// child processes.
const brokersEnv = "SURELY_ADAPTERTEST_KAFKA_BROKERS"

// newChildSubscriber builds a crash-test child's subscriber, on the parent's
// kfake cluster.
func newChildSubscriber(group string) (message.Subscriber, error) {
	return surelykafka.NewSubscriber(strings.Split(os.Getenv(brokersEnv), ","),
		group, surelykafka.WithSaramaConfig(fastGroupConfig))
}

// startKafka starts an in-process Kafka (franz-go's kfake) on loopback
// ports, closed when the test ends. Topics it creates by itself (reading
// metadata with auto creation on) get 4 partitions.
func startKafka(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(4),
		kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// fastGroupConfig adjusts the subscribers' Sarama configuration in the
// tests: surely's defaults with a group that notices a dead or new member in
// seconds rather than Kafka's 10 s session and 3 s heartbeat.
func fastGroupConfig(c *sarama.Config) {
	// Long enough that heartbeats delayed by a loaded machine (-race, every
	// package at once on 2 cores) do not expire sessions: at 2 s, members
	// were evicted mid-rebalance and a group stalled past Watermill's 30 s.
	c.Consumer.Group.Session.Timeout = 6 * time.Second
	c.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	c.Consumer.Group.Rebalance.Timeout = 15 * time.Second
	c.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	c.Consumer.Retry.Backoff = 200 * time.Millisecond
	c.Metadata.Retry.Backoff = 100 * time.Millisecond
}

// newTopic creates a topic of 4 partitions with a random name.
func newTopic(t testing.TB, brokers []string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	topic := "surely-" + hex.EncodeToString(b)
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	require.NoError(t, err)
	defer func() { _ = admin.Close() }()
	require.NoError(t, surelykafka.EnsureTopic(admin, topic, sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: 1}))
	return topic
}
