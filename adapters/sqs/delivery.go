package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/surely-dev/surely/delivery"
)

// receiveCountAttribute is the SQS system attribute the Subscriber asks
// for and reads into delivery.Info.
const receiveCountAttribute = string(types.MessageSystemAttributeNameApproximateReceiveCount)

// errSettled is returned by Extend after the message was acked or nacked.
var errSettled = errors.New("sqs: message already settled")

// visibilityChanger is the part of the SQS client a delivery uses.
type visibilityChanger interface {
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput,
		optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
}

// received is one SQS delivery and what surely's middleware asked for it.
// It is the message's delivery.Control.
type received struct {
	receipt string
	info    delivery.Info
	hasInfo bool

	// Set when the subscription hands the message out.
	msg        *message.Message
	client     visibilityChanger
	queueURL   string
	visibility time.Duration

	mu      sync.Mutex // orders Extend before the nack's visibility change
	delay   time.Duration
	settled bool
}

var _ delivery.Control = (*received)(nil)

func newReceived(m *types.Message) *received {
	r := &received{receipt: aws.ToString(m.ReceiptHandle)}
	if n, ok := receiveCount(m.Attributes); ok {
		r.info = delivery.Info{Count: n, Redelivered: n > 1}
		r.hasInfo = true
	}
	return r
}

// receiveCount reads ApproximateReceiveCount; ok is false when it is
// missing or not a positive integer.
func receiveCount(attrs map[string]string) (int, bool) {
	n, err := strconv.Atoi(attrs[receiveCountAttribute])
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// NackAfter makes the nack that follows set the message's visibility
// timeout to d (rounded up to whole seconds, at most 12h) instead of 0.
func (r *received) NackAfter(d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delay = max(d, 0)
	return true
}

// Extend resets the message's visibility timeout to the subscriber's
// (delivery.WithAckWait), with ChangeMessageVisibility.
func (r *received) Extend(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled || r.msg != nil && (closed(r.msg.Acked()) || closed(r.msg.Nacked())) {
		return errSettled
	}
	return r.changeVisibility(ctx, r.visibility)
}

// nack makes the message visible again at once, or after NackAfter's delay.
func (r *received) nack(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = true
	return r.changeVisibility(ctx, r.delay)
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (r *received) acked() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = true
}

func (r *received) changeVisibility(ctx context.Context, d time.Duration) error {
	_, err := r.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(r.queueURL),
		ReceiptHandle:     aws.String(r.receipt),
		VisibilityTimeout: visibilitySeconds(d),
	})
	if err != nil {
		return fmt.Errorf("sqs: change message visibility to %v: %w", d, err)
	}
	return nil
}

// visibilitySeconds rounds d up to whole seconds within SQS's limits.
func visibilitySeconds(d time.Duration) int32 {
	d = min(max(d, 0), maxVisibility)
	return int32((d + time.Second - 1) / time.Second)
}

// pending hands the delivery facts that the Unmarshaler read to the
// subscription that forwards the message (watermill-aws replaces the
// message context after unmarshaling, so they cannot ride on it).
type pending struct {
	mu sync.Mutex
	m  map[*message.Message]*received
}

func (p *pending) put(msg *message.Message, r *received) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[*message.Message]*received)
	}
	p.m[msg] = r
}

func (p *pending) take(msg *message.Message) *received {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.m[msg]
	delete(p.m, msg)
	return r
}

func (p *pending) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.m)
}

// unmarshaler wraps the configured Unmarshaler: it never fails (an
// undecodable message becomes a marked one, which watermill-aws would
// otherwise skip and receive again and again), and it records each
// message's delivery facts.
type unmarshaler struct {
	inner   wmsqs.Unmarshaler
	strict  bool // the default unmarshaler: check the attributes it would misread
	pending *pending
}

func (u *unmarshaler) Unmarshal(m *types.Message) (*message.Message, error) {
	msg, err := u.decode(m)
	if err != nil {
		msg = undecodable(m, err)
	}
	u.pending.put(msg, newReceived(m))
	return msg, nil
}

// decode runs the inner Unmarshaler, turning a panic or a nil message into
// an error.
func (u *unmarshaler) decode(m *types.Message) (msg *message.Message, err error) {
	if u.strict {
		if err := checkAttributes(m.MessageAttributes); err != nil {
			return nil, err
		}
	}
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, fmt.Errorf("unmarshaler panicked: %v", p)
		}
	}()
	msg, err = u.inner.Unmarshal(m)
	if err == nil && msg == nil {
		err = errors.New("unmarshaler returned no message")
	}
	return msg, err
}

// checkAttributes refuses what watermill-aws' DefaultMarshalerUnmarshaler
// would silently drop or crash on: an attribute without a data type or
// value, a custom data type ("String.x"), a UUID attribute that is not a
// string.
func checkAttributes(attrs map[string]types.MessageAttributeValue) error {
	for name, v := range attrs {
		typ := aws.ToString(v.DataType)
		if name == wmsqs.UUIDAttribute && typ != wmsqs.AWSStringDataType {
			return fmt.Errorf("message attribute %q has data type %q, not String", name, typ)
		}
		switch typ {
		case wmsqs.AWSStringDataType, wmsqs.AWSNumberDataType:
			if v.StringValue == nil {
				return fmt.Errorf("message attribute %q of type %s has no string value", name, typ)
			}
		case wmsqs.AWSBinaryDataType:
		default:
			return fmt.Errorf("message attribute %q has data type %q, which Watermill metadata cannot hold", name, typ)
		}
	}
	return nil
}

// undecodable builds the marked message for an SQS message that could not
// be decoded: the raw body as payload, the error (delivery.KeyDecodeError),
// and the raw message attributes ("surely_decode_headers") as JSON, the
// AWS SDK's MessageAttributeValue with binary values in base64, when there
// were any. Its
// UUID is the UUID attribute when it is a string, else the SQS message ID,
// stable across redeliveries.
func undecodable(m *types.Message, err error) *message.Message {
	id := aws.ToString(m.MessageId)
	if v, ok := m.MessageAttributes[wmsqs.UUIDAttribute]; ok && aws.ToString(v.DataType) == wmsqs.AWSStringDataType &&
		strings.TrimSpace(aws.ToString(v.StringValue)) != "" {
		id = aws.ToString(v.StringValue)
	}
	msg := message.NewMessage(id, []byte(aws.ToString(m.Body)))
	msg.Metadata.Set(delivery.KeyDecodeError, err.Error())
	if len(m.MessageAttributes) > 0 {
		if b, jerr := json.Marshal(m.MessageAttributes); jerr == nil {
			msg.Metadata.Set(delivery.KeyDecodeHeaders, string(b))
		}
	}
	return msg
}
