package sqs

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// Limits of SQS, and how the Subscriber receives.
const (
	// maxVisibility is SQS's longest visibility timeout (12 hours).
	maxVisibility = 12 * time.Hour
	// maxWaitTime is SQS's longest long poll.
	maxWaitTime = 20 * time.Second
	// maxBatch is how many messages one ReceiveMessage asks for: one, so
	// that a nack never drops the rest of a batch (watermill-aws stops
	// handing out a received batch at the first nack; those messages would
	// wait out their visibility timeout) and no message waits in the
	// client while its visibility timeout runs.
	maxBatch = 1
)

// MarshalerUnmarshaler converts Watermill messages to SQS messages
// (Marshal, the Publisher's side) and back (Unmarshal, the Subscriber's).
// watermill-aws' DefaultMarshalerUnmarshaler is one.
type MarshalerUnmarshaler interface {
	wmsqs.Marshaler
	wmsqs.Unmarshaler
}

// Names under which this package's options record their values.
const (
	optClientOptions = "WithClientOptions"
	optAckWait       = "WithAckWait"
	optWaitTime      = "WithWaitTime"
	optConcurrency   = "WithConcurrency"
	optMarshaler     = "WithMarshaler"
)

// WithClientOptions adds options of the SQS client the Subscriber or the
// Publisher makes from its aws.Config: an endpoint (BaseEndpoint), an HTTP
// client, retries.
func WithClientOptions(fns ...func(*awssqs.Options)) delivery.Option {
	return func(s *options.Set) error {
		for _, f := range fns {
			if f == nil {
				return fmt.Errorf("%w: sqs.WithClientOptions: nil function", delivery.ErrInvalidOption)
			}
		}
		prev, err := options.GetAs[[]func(*awssqs.Options)](s, delivery.ErrInvalidOption, "sqs.WithClientOptions", optClientOptions, nil)
		if err != nil {
			return err
		}
		s.Put(optClientOptions, append(prev[:len(prev):len(prev)], fns...))
		return nil
	}
}

// WithAckWait sets the SQS visibility timeout: how long SQS hides a
// received message from other consumers before it hands it out again
// (default 30s; whole seconds, from 1s to 12h). It is asked for with every
// ReceiveMessage (so it holds whatever the queue's own setting), set on the
// queues the Subscriber creates, and what delivery.Control.Extend resets
// the visibility to. surely's dedup step extends it every lease/3 while the
// handler runs, so it needs to exceed that interval, not the longest
// handler.
func WithAckWait(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		if d < time.Second || d > maxVisibility || d%time.Second != 0 {
			return fmt.Errorf("%w: sqs.WithAckWait: %v must be whole seconds from 1s to %v", delivery.ErrInvalidOption, d, maxVisibility)
		}
		s.Put(optAckWait, d)
		return nil
	}
}

// WithWaitTime sets the long poll of each ReceiveMessage (default 20s;
// whole seconds, from 1s to 20s): an idle queue costs one request per wait
// time per receiver.
func WithWaitTime(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		if d < time.Second || d > maxWaitTime || d%time.Second != 0 {
			return fmt.Errorf("%w: sqs.WithWaitTime: %v must be whole seconds from 1s to %v", delivery.ErrInvalidOption, d, maxWaitTime)
		}
		s.Put(optWaitTime, d)
		return nil
	}
}

// WithConcurrency sets how many messages of one topic are in flight at once
// (default 1, at least 1): watermill-aws' ConsumeWorkers, each receiving
// one message and waiting for its ack or nack.
func WithConcurrency(n int) delivery.Option {
	return func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: sqs.WithConcurrency: %d is not positive", delivery.ErrInvalidOption, n)
		}
		s.Put(optConcurrency, n)
		return nil
	}
}

// WithMarshaler sets how Watermill messages and SQS messages convert, for
// the Publisher (Marshal) and the Subscriber (Unmarshal); give both sides
// the same one. The default is watermill-aws' DefaultMarshalerUnmarshaler
// (metadata as String message attributes, the UUID in
// _watermill_message_uuid), whose Subscriber side checks the attributes
// first (see the package doc); a marshaler given here gets them unchecked.
func WithMarshaler(m MarshalerUnmarshaler) delivery.Option {
	return func(s *options.Set) error {
		if m == nil {
			return fmt.Errorf("%w: sqs.WithMarshaler: nil", delivery.ErrInvalidOption)
		}
		s.Put(optMarshaler, m)
		return nil
	}
}

// subscriberConfig is what NewSubscriber's arguments and options set.
type subscriberConfig struct {
	aws          aws.Config
	clientOpts   []func(*awssqs.Options)
	visibility   time.Duration
	waitTime     time.Duration
	concurrency  int
	unmarshaler  wmsqs.Unmarshaler // nil: the default, checked
	closeTimeout time.Duration
	logger       *slog.Logger
}

func newSubscriberConfig(cfg aws.Config, opts []delivery.Option) (subscriberConfig, error) {
	const who = "sqs.NewSubscriber"
	c := subscriberConfig{aws: cfg}
	if cfg.Credentials == nil {
		return c, fmt.Errorf("%w: %s: the aws.Config has no Credentials", delivery.ErrInvalidOption, who)
	}
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return c, err
	}
	if err := s.Check(delivery.ErrInvalidOption, who, optClientOptions, optAckWait, optWaitTime, optConcurrency,
		optMarshaler, options.CloseTimeout, options.Logger); err != nil {
		return c, err
	}
	if c.clientOpts, err = options.GetAs[[]func(*awssqs.Options)](s, delivery.ErrInvalidOption, who, optClientOptions, nil); err != nil {
		return c, err
	}
	if c.visibility, err = options.GetAs(s, delivery.ErrInvalidOption, who, optAckWait, 30*time.Second); err != nil {
		return c, err
	}
	c.waitTime = options.Get(s, optWaitTime, maxWaitTime)
	if c.concurrency, err = options.GetAs(s, delivery.ErrInvalidOption, who, optConcurrency, 1); err != nil {
		return c, err
	}
	// Options whose names other adapters share were checked by this
	// package's option only if they came from it.
	for _, o := range []delivery.Option{WithAckWait(c.visibility), WithConcurrency(c.concurrency)} {
		if err := o(&options.Set{}); err != nil {
			return c, err
		}
	}
	m, err := options.GetAs[MarshalerUnmarshaler](s, delivery.ErrInvalidOption, who, optMarshaler, nil)
	if err != nil {
		return c, err
	}
	if m != nil {
		c.unmarshaler = m
	}
	c.closeTimeout = options.Get(s, options.CloseTimeout, delivery.DefaultCloseTimeout)
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}

// receiveInput returns watermill-aws' GenerateReceiveMessageInput for c:
// one message per call, long polling, c's visibility timeout, every
// message attribute, and ApproximateReceiveCount.
func (c subscriberConfig) receiveInput() wmsqs.GenerateReceiveMessageInputFunc {
	return func(_ context.Context, queueURL wmsqs.QueueURL) (*awssqs.ReceiveMessageInput, error) {
		return &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(string(queueURL)),
			MaxNumberOfMessages:         maxBatch,
			WaitTimeSeconds:             int32(c.waitTime / time.Second),
			VisibilityTimeout:           int32(c.visibility / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		}, nil
	}
}

// queueAttributes are the attributes of a queue the subscriber creates.
func (c subscriberConfig) queueAttributes() wmsqs.QueueConfigAttributes {
	return wmsqs.QueueConfigAttributes{VisibilityTimeout: strconv.Itoa(int(c.visibility / time.Second))}
}

// publisherConfig is what NewPublisher's arguments and options set.
type publisherConfig struct {
	aws        aws.Config
	clientOpts []func(*awssqs.Options)
	marshaler  wmsqs.Marshaler // nil: watermill-aws' default
	logger     *slog.Logger
}

func newPublisherConfig(cfg aws.Config, opts []delivery.Option) (publisherConfig, error) {
	const who = "sqs.NewPublisher"
	c := publisherConfig{aws: cfg}
	if cfg.Credentials == nil {
		return c, fmt.Errorf("%w: %s: the aws.Config has no Credentials", delivery.ErrInvalidOption, who)
	}
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return c, err
	}
	if err := s.Check(delivery.ErrInvalidOption, who, optClientOptions, optMarshaler, options.Logger); err != nil {
		return c, err
	}
	if c.clientOpts, err = options.GetAs[[]func(*awssqs.Options)](s, delivery.ErrInvalidOption, who, optClientOptions, nil); err != nil {
		return c, err
	}
	m, err := options.GetAs[MarshalerUnmarshaler](s, delivery.ErrInvalidOption, who, optMarshaler, nil)
	if err != nil {
		return c, err
	}
	if m != nil {
		c.marshaler = m
	}
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}
