package kafka

import (
	"github.com/IBM/sarama"

	"github.com/surely-dev/surely/delivery"
)

// SubscriberSaramaConfig is the Sarama configuration NewSubscriber would
// use with opts.
func SubscriberSaramaConfig(opts ...delivery.Option) (*sarama.Config, error) {
	c, err := newSubscriberConfig("g", opts)
	return c.sarama, err
}

// PublisherSaramaConfig is the Sarama configuration NewPublisher would
// use with opts.
func PublisherSaramaConfig(opts ...delivery.Option) (*sarama.Config, error) {
	c, err := newPublisherConfig(opts)
	return c.sarama, err
}
