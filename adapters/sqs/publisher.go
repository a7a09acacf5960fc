package sqs

import (
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Publisher is a Watermill publisher on Amazon SQS: watermill-aws'
// publisher, which never creates queues here. Publish returns after SQS
// accepted every message (SendMessage, one at a time).
type Publisher struct {
	inner *wmsqs.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher with its own SQS client. It resolves a
// queue's URL once (GetQueueUrl) and caches it: no queue round trip per
// publish. It never creates a queue: publishing to a queue that does not
// exist fails (a queue created by a typo would keep messages nobody
// reads); subscribers create their queues (Subscriber.SubscribeInitialize).
// logger may be nil (discard).
func NewPublisher(cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if cfg.AWSConfig.Credentials == nil {
		return nil, fmt.Errorf("%w: AWSConfig.Credentials is nil", ErrInvalidOption)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	inner, err := wmsqs.NewPublisher(wmsqs.PublisherConfig{
		AWSConfig:                   cfg.AWSConfig,
		OptFns:                      cfg.OptFns,
		DoNotCreateQueueIfNotExists: true,
		QueueUrlResolver:            wmsqs.NewGetQueueUrlByNameUrlResolver(wmsqs.GetQueueUrlByNameUrlResolverConfig{}),
		Marshaler:                   cfg.Marshaler,
	}, watermill.NewSlogLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return &Publisher{inner: inner}, nil
}

// Publish sends msgs to the queue named topic, one after the other. It
// stops at the first failure: the messages before it are sent, that one
// and the rest are not.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.inner.Publish(topic, msgs...)
}

// Close releases nothing (the SQS client holds no connection of its own
// beyond its HTTP client's idle ones); it is there for message.Publisher.
func (p *Publisher) Close() error { return p.inner.Close() }
