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

// marshalerUnmarshaler converts Watermill messages to SQS messages
// (Marshal, the Publisher's side) and back (Unmarshal, the Subscriber's).
// watermill-aws' DefaultMarshalerUnmarshaler is one.
type marshalerUnmarshaler interface {
	wmsqs.Marshaler
	wmsqs.Unmarshaler
}

// Names of this package's options (see internal/options.Load): qualified
// with the package, so that another adapter's option of the same name is
// refused by name.
const (
	optClientOptions = "sqs.WithClientOptions"
	optWaitTime      = "sqs.WithWaitTime"
	optMarshaler     = "sqs.WithMarshaler"
)

// WithClientOptions adds options of the SQS client the Subscriber or the
// Publisher makes from its aws.Config: an endpoint (BaseEndpoint), an HTTP
// client, retries.
func WithClientOptions(fns ...func(*awssqs.Options)) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		for _, f := range fns {
			if f == nil {
				return fmt.Errorf("%w: %s: nil function", delivery.ErrInvalidOption, optClientOptions)
			}
		}
		prev := options.Get[[]func(*awssqs.Options)](s, optClientOptions, nil)
		s.Put(optClientOptions, append(prev[:len(prev):len(prev)], fns...))
		return nil
	})
}

// WithWaitTime sets the long poll of each ReceiveMessage (default 20s;
// whole seconds, from 1s to 20s): an idle queue costs one request per wait
// time per receiver.
func WithWaitTime(d time.Duration) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		if d < time.Second || d > maxWaitTime || d%time.Second != 0 {
			return fmt.Errorf("%w: %s(%v): not whole seconds from 1s to %v", delivery.ErrInvalidOption, optWaitTime, d, maxWaitTime)
		}
		s.Put(optWaitTime, d)
		return nil
	})
}

// WithMarshaler sets how Watermill messages and SQS messages convert, for
// the Publisher (Marshal) and the Subscriber (Unmarshal); give both sides
// the same one. The default is watermill-aws' DefaultMarshalerUnmarshaler
// (metadata as String message attributes, the UUID in
// _watermill_message_uuid), whose Subscriber side checks the attributes
// first (see the package doc); a marshaler given here gets them unchecked.
func WithMarshaler(m interface {
	wmsqs.Marshaler
	wmsqs.Unmarshaler
}) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error { return options.PutNotNil(s, delivery.ErrInvalidOption, optMarshaler, m) })
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
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, optClientOptions, options.AckWait, optWaitTime,
		options.Concurrency, optMarshaler, options.CloseTimeout, options.Logger)
	if err != nil {
		return c, err
	}
	c.clientOpts = options.Get[[]func(*awssqs.Options)](s, optClientOptions, nil)
	if c.visibility, err = options.Within(s, delivery.ErrInvalidOption, who, options.AckWait, 30*time.Second, time.Second, maxVisibility); err != nil {
		return c, err
	}
	if c.visibility%time.Second != 0 {
		return c, fmt.Errorf("%w: %s: WithAckWait(%v): not whole seconds", delivery.ErrInvalidOption, who, c.visibility)
	}
	c.waitTime = options.Get(s, optWaitTime, maxWaitTime)
	c.concurrency = options.Get(s, options.Concurrency, 1)
	if m := options.Get[marshalerUnmarshaler](s, optMarshaler, nil); m != nil {
		c.unmarshaler = m
	}
	c.closeTimeout = options.Get(s, options.CloseTimeout, options.DefaultCloseTimeout)
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
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, optClientOptions, optMarshaler, options.Logger)
	if err != nil {
		return c, err
	}
	c.clientOpts = options.Get[[]func(*awssqs.Options)](s, optClientOptions, nil)
	if m := options.Get[marshalerUnmarshaler](s, optMarshaler, nil); m != nil {
		c.marshaler = m
	}
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}
