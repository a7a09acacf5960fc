package amqp

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
)

type unmarshalFunc func(amqp.Delivery) (*message.Message, error)

func (f unmarshalFunc) Marshal(*message.Message) (amqp.Publishing, error) {
	return amqp.Publishing{}, errors.New("not for publishing")
}
func (f unmarshalFunc) Unmarshal(d amqp.Delivery) (*message.Message, error) { return f(d) }

func TestDeliveryInfo(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		d    amqp.Delivery
		want delivery.Info
	}{
		"first delivery": {amqp.Delivery{}, delivery.Info{Count: 1}},
		"first, with a publisher's header": {amqp.Delivery{Headers: amqp.Table{deliveryCountHeader: int64(7)}},
			delivery.Info{Count: 1}},
		"quorum redelivery": {amqp.Delivery{Redelivered: true, Headers: amqp.Table{deliveryCountHeader: int64(1)}},
			delivery.Info{Count: 2, Redelivered: true}},
		"int32 count": {amqp.Delivery{Redelivered: true, Headers: amqp.Table{deliveryCountHeader: int32(4)}},
			delivery.Info{Count: 5, Redelivered: true}},
		"classic redelivery": {amqp.Delivery{Redelivered: true}, delivery.Info{Redelivered: true}},
		"text count": {amqp.Delivery{Redelivered: true, Headers: amqp.Table{deliveryCountHeader: "3"}},
			delivery.Info{Redelivered: true}},
		"zero count": {amqp.Delivery{Redelivered: true, Headers: amqp.Table{deliveryCountHeader: int64(0)}},
			delivery.Info{Redelivered: true}},
	} {
		require.Equal(t, c.want, deliveryInfo(c.d), name)
	}
}

func TestReceiveDecodesAndDropsTheCount(t *testing.T) {
	t.Parallel()
	headers := amqp.Table{
		"_watermill_message_uuid": "uuid-1", "k": "v", "n": int32(5), "u": uint8(7), "f": 1.5, "b": false,
		deliveryCountHeader: int64(2),
	}
	var seen amqp.Delivery
	u := defaultMarshaler()
	msg, info := receive(unmarshalFunc(func(d amqp.Delivery) (*message.Message, error) {
		seen = d
		return u.Unmarshal(d)
	}), amqp.Delivery{Redelivered: true, Body: []byte("payload"), Headers: headers})
	require.Equal(t, delivery.Info{Count: 3, Redelivered: true}, info)
	require.Equal(t, "uuid-1", msg.UUID)
	require.Equal(t, "payload", string(msg.Payload))
	require.Equal(t, message.Metadata{"k": "v", "n": "5", "u": "7", "f": "1.5", "b": "false"}, msg.Metadata)
	_, marked := delivery.DecodeError(msg)
	require.False(t, marked)
	require.Nil(t, seen.Acknowledger, "the marshaler cannot ack")
	require.Contains(t, headers, deliveryCountHeader, "the delivery's own table is left alone")
	require.Equal(t, int32(5), headers["n"])
}

func TestReceiveNeverFails(t *testing.T) {
	t.Parallel()
	for name, u := range map[string]interface {
		Unmarshal(amqp.Delivery) (*message.Message, error)
		Marshal(*message.Message) (amqp.Publishing, error)
	}{
		"error":        unmarshalFunc(func(amqp.Delivery) (*message.Message, error) { return nil, errors.New("bad json") }),
		"panic":        unmarshalFunc(func(amqp.Delivery) (*message.Message, error) { panic("boom") }),
		"nil":          unmarshalFunc(func(amqp.Delivery) (*message.Message, error) { return nil, nil }),
		"table header": defaultMarshaler(),
	} {
		d := amqp.Delivery{Redelivered: true, Body: []byte("payload"), Headers: amqp.Table{
			"t": amqp.Table{"a": int32(1)}, deliveryCountHeader: int64(3),
		}}
		msg, info := receive(u, d)
		text, marked := delivery.DecodeError(msg)
		require.True(t, marked, name)
		require.NotEmpty(t, text, name)
		require.Equal(t, "payload", string(msg.Payload), name)
		require.Len(t, msg.Metadata, 2, name)
		require.JSONEq(t, `{"t":{"a":1}}`, msg.Metadata.Get(delivery.KeyDecodeHeaders), name)
		require.Equal(t, delivery.Info{Count: 4, Redelivered: true}, info, name)
		again, _ := receive(u, d)
		require.Equal(t, msg.UUID, again.UUID, "%s: a stable UUID", name)
		require.Contains(t, msg.UUID, "amqp-", name)
	}
	msg, _ := receive(defaultMarshaler(), amqp.Delivery{MessageId: "m-1", Headers: amqp.Table{"x": []any{"a"}}})
	require.Equal(t, "m-1", msg.UUID, "the message-id property names an undecodable message")
	msg, _ = receive(defaultMarshaler(), amqp.Delivery{Headers: amqp.Table{"_watermill_message_uuid": "u-1", "x": time.Unix(0, 0)}})
	require.Equal(t, "u-1", msg.UUID)
	_, marked := delivery.DecodeError(msg)
	require.True(t, marked, "a timestamp header has no faithful text form")
	msg, _ = receive(defaultMarshaler(), amqp.Delivery{Headers: amqp.Table{"_watermill_message_uuid": int32(1)}})
	_, marked = delivery.DecodeError(msg)
	require.True(t, marked, "a UUID that is not a string")
}

func TestNoHeadersAtAll(t *testing.T) {
	t.Parallel()
	msg, info := receive(defaultMarshaler(), amqp.Delivery{Body: []byte("x")})
	_, marked := delivery.DecodeError(msg)
	require.False(t, marked)
	require.Empty(t, msg.UUID, "a message from another client may have no Watermill UUID")
	require.Equal(t, delivery.Info{Count: 1}, info)
}

func TestControlIsHonest(t *testing.T) {
	t.Parallel()
	var c delivery.Control = control{}
	require.False(t, c.NackAfter(time.Second), "AMQP cannot delay a redelivery: the middleware waits")
	require.NoError(t, c.Extend(t.Context()))
}
