package amqp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/delivery"
)

// deliveryCountHeader is the header in which a quorum queue counts the
// earlier deliveries of a message (absent on the first). The Subscriber
// turns it into delivery.Info.Count and removes it from the message's
// metadata, so that surely never publishes it again (a quorum queue keeps a
// publisher's x-delivery-count on the first delivery: measured).
const deliveryCountHeader = "x-delivery-count"

// control is the delivery.Control of every AMQP delivery: core AMQP can do
// neither of its two things.
type control struct{}

var _ delivery.Control = control{}

// NackAfter reports false: AMQP 0-9-1 has no per-message redelivery delay
// (a nack with requeue puts the message back at once), so the middleware
// waits before it nacks.
func (control) NackAfter(time.Duration) bool { return false }

// Extend does nothing and returns nil: an unacked AMQP message is not
// redelivered while its channel lives, however long the handler runs (up
// to the broker's consumer_timeout, 30 minutes by default), so there is no
// lease to extend.
func (control) Extend(context.Context) error { return nil }

// deliveryInfo reads the delivery count of d. A delivery without the
// redelivered flag is the first (Count 1, whatever headers the publisher
// set). A redelivery from a quorum queue carries x-delivery-count, the
// number of earlier deliveries, so Count is that plus one; a redelivery
// without it (a classic queue) has Count 0, unknown.
func deliveryInfo(d amqp.Delivery) delivery.Info {
	info := delivery.Info{Redelivered: d.Redelivered}
	if !d.Redelivered {
		info.Count = 1
		return info
	}
	if n, ok := intValue(d.Headers[deliveryCountHeader]); ok && n >= 1 && n < 1<<31 {
		info.Count = int(n) + 1
	}
	return info
}

// receive decodes d with u into a Watermill message and the delivery's
// facts. It never fails: a delivery that cannot be decoded (an error, a
// panic, or no message) becomes a marked message.
func receive(u wmamqp.Marshaler, d amqp.Delivery) (*message.Message, delivery.Info) {
	info := deliveryInfo(d)
	in := d
	in.Acknowledger = nil
	if _, ok := d.Headers[deliveryCountHeader]; ok {
		in.Headers = make(amqp.Table, len(d.Headers)-1)
		for k, v := range d.Headers {
			if k != deliveryCountHeader {
				in.Headers[k] = v
			}
		}
	}
	msg, err := decode(u, in)
	if err != nil {
		msg = undecodable(in, err)
	}
	return msg, info
}

// decode runs u on d, turning a panic or a nil message into an error.
func decode(u wmamqp.Marshaler, d amqp.Delivery) (msg *message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, fmt.Errorf("unmarshaler panicked: %v", p)
		}
	}()
	msg, err = u.Unmarshal(d)
	if err == nil && msg == nil {
		err = errors.New("unmarshaler returned no message")
	}
	return msg, err
}

// undecodable builds the marked message for a delivery that could not be
// decoded: the raw body, the error, and the raw headers as JSON. Its UUID is
// the Watermill UUID header when it is a string, else the AMQP message-id
// property, else "amqp-" and a hash of the headers and body: stable across
// redeliveries.
func undecodable(d amqp.Delivery, err error) *message.Message {
	var headers []byte
	if len(d.Headers) > 0 {
		var jerr error
		if headers, jerr = json.Marshal(d.Headers); jerr != nil {
			// A value JSON cannot hold (NaN, a year past 9999): keep the
			// headers' text form, as a JSON string (never fails).
			headers, _ = json.Marshal(fmt.Sprintf("%v", d.Headers))
		}
	}
	id, _ := d.Headers[wmamqp.DefaultMessageUUIDHeaderKey].(string)
	if id == "" {
		id = d.MessageId
	}
	if id == "" {
		h := sha256.New()
		_, _ = h.Write(headers)
		_, _ = h.Write([]byte{0})
		_, _ = h.Write(d.Body)
		id = "amqp-" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	msg := message.NewMessage(id, append([]byte(nil), d.Body...))
	msg.Metadata.Set(delivery.KeyDecodeError, err.Error())
	if headers != nil {
		msg.Metadata.Set(delivery.KeyDecodeHeaders, string(headers))
	}
	return msg
}
