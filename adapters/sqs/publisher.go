package sqs

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/surely-dev/surely/delivery"
)

// Publisher is a Watermill publisher on Amazon SQS: watermill-aws'
// publisher, which never creates queues here. Publish returns after SQS
// accepted every message (SendMessage, one at a time).
type Publisher struct {
	inner *wmsqs.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher with its own SQS client, made from cfg
// (its region and credentials, required). It resolves a queue's URL once
// (GetQueueUrl) and caches it: no queue round trip per publish. It never
// creates a queue: publishing to a queue that does not exist fails (a
// queue created by a typo would keep messages nobody reads); subscribers
// create their queues (Subscriber.SubscribeInitialize). It takes
// WithClientOptions, WithMarshaler and delivery.WithLogger; any other
// option is refused with an error wrapping delivery.ErrInvalidOption.
func NewPublisher(cfg aws.Config, opts ...delivery.Option) (*Publisher, error) {
	c, err := newPublisherConfig(cfg, opts)
	if err != nil {
		return nil, err
	}
	inner, err := wmsqs.NewPublisher(wmsqs.PublisherConfig{
		AWSConfig:                   c.aws,
		OptFns:                      c.clientOpts,
		DoNotCreateQueueIfNotExists: true,
		QueueUrlResolver:            wmsqs.NewGetQueueUrlByNameUrlResolver(wmsqs.GetQueueUrlByNameUrlResolverConfig{}),
		Marshaler:                   c.marshaler,
	}, watermill.NewSlogLogger(c.logger))
	if err != nil {
		return nil, fmt.Errorf("%w: sqs.NewPublisher: %w", delivery.ErrInvalidOption, err)
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
