package sqs

import (
	"fmt"
	"unicode/utf8"

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
	text  bool // the default marshaler: payload and metadata travel as SQS text
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
	return &Publisher{inner: inner, text: c.marshaler == nil}, nil
}

// Publish sends msgs to the queue named topic, one after the other. It
// stops at the first failure: the messages before it are sent, that one
// and the rest are not. With the default marshaler, a message whose
// payload or metadata SQS cannot carry as text (not UTF-8, or a control
// character other than tab, newline and carriage return) is refused
// before it is sent: SQS refuses such a body, and an emulator may store
// it changed. Give such payloads a marshaler that encodes them.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.text {
		for i, m := range msgs {
			if err := sqsText(m); err != nil {
				if perr := p.inner.Publish(topic, msgs[:i]...); perr != nil {
					return perr
				}
				return err
			}
		}
	}
	return p.inner.Publish(topic, msgs...)
}

// sqsText reports, as an error, a payload or metadata value of m that is
// not text SQS accepts: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to
// #xFFFD | #x10000 to #x10FFFF, in UTF-8.
func sqsText(m *message.Message) error {
	if !isSQSText(string(m.Payload)) {
		return fmt.Errorf("sqs: message %s: the payload is not text SQS can carry (UTF-8 without control characters)", m.UUID)
	}
	for k, v := range m.Metadata {
		if !isSQSText(k) || !isSQSText(v) {
			return fmt.Errorf("sqs: message %s: metadata %q is not text SQS can carry", m.UUID, k)
		}
	}
	return nil
}

func isSQSText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// Close releases nothing (the SQS client holds no connection of its own
// beyond its HTTP client's idle ones); it is there for message.Publisher.
func (p *Publisher) Close() error { return p.inner.Close() }
