package nats

import (
	"errors"
	"testing"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
)

type unmarshalFunc func(*nats.Msg) (*message.Message, error)

func (f unmarshalFunc) Unmarshal(m *nats.Msg) (*message.Message, error) { return f(m) }

// fakeMsg is a delivered message; acking it is not supported.
type fakeMsg struct {
	jetstream.Msg
	header nats.Header
}

func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md := &jetstream.MsgMetadata{NumDelivered: 3, Stream: "ORDERS", Consumer: "billing-orders"}
	md.Sequence.Stream = 42
	return md, nil
}
func (m fakeMsg) Data() []byte         { return []byte("payload") }
func (m fakeMsg) Headers() nats.Header { return m.header }
func (m fakeMsg) Subject() string      { return "orders" }
func (m fakeMsg) Reply() string        { return "$JS.ACK.ORDERS.billing-orders.3.42.7.1700000000000000000.0" }
func (m fakeMsg) InProgress() error    { return nil }

func TestReceiveDecodesAndKeepsTheDelivery(t *testing.T) {
	t.Parallel()
	msg, r := receive(&wmnats.NATSMarshaler{}, fakeMsg{header: nats.Header{wmnats.WatermillUUIDHdr: {"uuid-1"}, "k": {"v"}}})
	require.Equal(t, "uuid-1", msg.UUID)
	require.Equal(t, "v", msg.Metadata.Get("k"))
	require.Equal(t, "payload", string(msg.Payload))
	_, marked := delivery.DecodeError(msg)
	require.False(t, marked)
	require.True(t, r.hasInfo)
	require.Equal(t, delivery.Info{Count: 3, Redelivered: true}, r.info)
}

func TestReceiveNeverFails(t *testing.T) {
	t.Parallel()
	for name, u := range map[string]wmnats.Unmarshaler{
		"error":           unmarshalFunc(func(*nats.Msg) (*message.Message, error) { return nil, errors.New("bad json") }),
		"panic":           unmarshalFunc(func(*nats.Msg) (*message.Message, error) { panic("boom") }),
		"nil":             unmarshalFunc(func(*nats.Msg) (*message.Message, error) { return nil, nil }),
		"multi-value hdr": &wmnats.NATSMarshaler{},
	} {
		msg, r := receive(u, fakeMsg{header: nats.Header{"k": {"a", "b"}}})
		text, marked := delivery.DecodeError(msg)
		require.True(t, marked, name)
		require.NotEmpty(t, text, name)
		require.Equal(t, "payload", string(msg.Payload), name)
		require.Equal(t, "nats-ORDERS-42", msg.UUID, "%s: stable across redeliveries", name)
		require.JSONEq(t, `{"k":["a","b"]}`, msg.Metadata.Get(delivery.KeyDecodeHeaders), name)
		require.True(t, r.hasInfo, name)
	}
}
