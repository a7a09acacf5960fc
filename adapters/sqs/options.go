package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// ErrInvalidOption wraps every configuration error of the constructors.
var ErrInvalidOption = errors.New("sqs: invalid option")

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("sqs: subscriber closed")

// Defaults and limits of Config.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultWaitTime          = 20 * time.Second
	DefaultConcurrency       = 1
	// MaxVisibilityTimeout is SQS's limit (12 hours).
	MaxVisibilityTimeout = 12 * time.Hour
	// MaxWaitTime is SQS's longest long poll.
	MaxWaitTime = 20 * time.Second
	// MaxBatch is how many messages one ReceiveMessage asks for: one, so
	// that a nack never drops the rest of a batch (watermill-aws stops
	// handing out a received batch at the first nack; those messages would
	// wait out their visibility timeout) and no message waits in the
	// client while its visibility timeout runs.
	MaxBatch = 1
)

// Config configures a Subscriber.
type Config struct {
	// AWSConfig holds the region and credentials (required) of the SQS
	// client the subscriber makes.
	AWSConfig aws.Config
	// OptFns are options of that client (an endpoint, an HTTP client).
	OptFns []func(*awssqs.Options)
	// VisibilityTimeout is how long SQS hides a received message from
	// other consumers (default 30s, whole seconds, at most 12h). It is
	// asked for with every ReceiveMessage (so it holds whatever the queue's
	// own setting), set on the queues the subscriber creates, and what
	// delivery.Control.Extend resets the visibility to. surely's dedup
	// step extends it every lease/3 while the handler runs, so it needs to
	// exceed that interval, not the longest handler.
	VisibilityTimeout time.Duration
	// WaitTime is the long poll of each ReceiveMessage (default and most
	// 20s, whole seconds).
	WaitTime time.Duration
	// Concurrency is how many messages of one topic are in flight at once
	// (default 1): watermill-aws' ConsumeWorkers, each receiving one
	// message (MaxBatch) and waiting for its ack or nack.
	Concurrency int
	// Unmarshaler turns SQS messages into Watermill messages (default:
	// watermill-aws' DefaultMarshalerUnmarshaler, with the message
	// attributes checked first; see the package doc). Use the publisher's
	// counterpart.
	Unmarshaler wmsqs.Unmarshaler
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.AWSConfig.Credentials == nil {
		return out, fmt.Errorf("%w: AWSConfig.Credentials is nil", ErrInvalidOption)
	}
	switch {
	case out.VisibilityTimeout == 0:
		out.VisibilityTimeout = DefaultVisibilityTimeout
	case out.VisibilityTimeout < time.Second || out.VisibilityTimeout > MaxVisibilityTimeout ||
		out.VisibilityTimeout%time.Second != 0:
		return out, fmt.Errorf("%w: VisibilityTimeout %v must be whole seconds from 1s to %v",
			ErrInvalidOption, out.VisibilityTimeout, MaxVisibilityTimeout)
	}
	switch {
	case out.WaitTime == 0:
		out.WaitTime = DefaultWaitTime
	case out.WaitTime < time.Second || out.WaitTime > MaxWaitTime || out.WaitTime%time.Second != 0:
		return out, fmt.Errorf("%w: WaitTime %v must be whole seconds from 1s to %v", ErrInvalidOption, out.WaitTime, MaxWaitTime)
	}
	switch {
	case out.Concurrency == 0:
		out.Concurrency = DefaultConcurrency
	case out.Concurrency < 0:
		return out, fmt.Errorf("%w: Concurrency %d is negative", ErrInvalidOption, out.Concurrency)
	}
	return out, nil
}

// receiveInput returns watermill-aws' GenerateReceiveMessageInput for c:
// one message per call, long polling, c's visibility timeout, every
// message attribute, and ApproximateReceiveCount.
func (c Config) receiveInput() wmsqs.GenerateReceiveMessageInputFunc {
	return func(_ context.Context, queueURL wmsqs.QueueURL) (*awssqs.ReceiveMessageInput, error) {
		return &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(string(queueURL)),
			MaxNumberOfMessages:         MaxBatch,
			WaitTimeSeconds:             int32(c.WaitTime / time.Second),
			VisibilityTimeout:           int32(c.VisibilityTimeout / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		}, nil
	}
}

// queueAttributes are the attributes of a queue the subscriber creates.
func (c Config) queueAttributes() wmsqs.QueueConfigAttributes {
	return wmsqs.QueueConfigAttributes{VisibilityTimeout: strconv.Itoa(int(c.VisibilityTimeout / time.Second))}
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// AWSConfig holds the region and credentials (required).
	AWSConfig aws.Config
	// OptFns are options of the SQS client.
	OptFns []func(*awssqs.Options)
	// Marshaler turns Watermill messages into SQS messages (default:
	// watermill-aws' DefaultMarshalerUnmarshaler: metadata as String
	// message attributes, the UUID in _watermill_message_uuid).
	Marshaler wmsqs.Marshaler
}
