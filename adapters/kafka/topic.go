package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/surely-dev/surely/delivery"
)

// EnsureTopic creates topic with detail unless it exists; an existing topic
// is never changed. admin belongs to the caller, who closes it.
//
// Zero NumPartitions and ReplicationFactor take the broker's defaults
// (num.partitions, default.replication.factor; Kafka 2.4 or later). For
// durability give ReplicationFactor 3 and min.insync.replicas 2 in
// ConfigEntries: the Publisher's WaitForAll then means two copies at least.
func EnsureTopic(admin sarama.ClusterAdmin, topic string, detail sarama.TopicDetail) error {
	if topic == "" {
		return fmt.Errorf("%w: kafka.EnsureTopic: empty topic", delivery.ErrInvalidOption)
	}
	if detail.NumPartitions == 0 {
		detail.NumPartitions = -1
	}
	if detail.ReplicationFactor == 0 {
		detail.ReplicationFactor = -1
	}
	err := admin.CreateTopic(topic, &detail, false)
	if errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kafka: create topic %q: %w", topic, err)
	}
	return nil
}
