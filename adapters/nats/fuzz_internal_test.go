package nats

import (
	"bytes"
	"encoding/json"
	"testing"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/surely-dev/surely/delivery"
)

// wireMsg is a delivered JetStream message built from fuzz input.
type wireMsg struct {
	jetstream.Msg
	header    nats.Header
	data      []byte
	delivered uint64
	noMeta    bool
}

func (m wireMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.noMeta {
		return nil, jetstream.ErrNotJSMessage
	}
	md := &jetstream.MsgMetadata{NumDelivered: m.delivered, Stream: "ORDERS", Consumer: "billing-orders"}
	md.Sequence.Stream = 42
	return md, nil
}
func (m wireMsg) Data() []byte         { return m.data }
func (m wireMsg) Headers() nats.Header { return m.header }
func (m wireMsg) Subject() string      { return "orders" }
func (m wireMsg) Reply() string        { return "" }

// FuzzReceive parses an untrusted NATS header block the way the client
// does (nats.DecodeHeadersMsg) and decodes the message with the Watermill
// marshaler. receive must never panic or lose the payload; an undecodable
// message (a repeated or empty header, say) must be marked, carry only the
// marker keys with valid JSON headers, and keep a UUID stable across
// redeliveries; a decoded one must keep every single-valued header.
func FuzzReceive(f *testing.F) {
	f.Add([]byte("NATS/1.0\r\n_watermill_message_uuid: u-1\r\nk: v\r\n\r\n"), []byte("payload"), uint64(1), false)
	f.Add([]byte("NATS/1.0\r\nk: a\r\nk: b\r\n\r\n"), []byte("payload"), uint64(3), false)
	f.Add([]byte("NATS/1.0 503\r\n\r\n"), []byte{}, uint64(0), true)
	f.Add([]byte("NATS/1.0\r\nk:\r\n\r\n"), []byte("\x00\xff"), uint64(2), false)
	f.Add([]byte("NATS/1.0\r\nk\xff: \xc3\x28\r\nNats-Msg-Id: dup\r\n\r\n"), []byte("x"), uint64(1<<40), false)
	f.Add([]byte("NATS/1.0\r\n  folded: x\r\n\r\n"), []byte("x"), uint64(1), false)
	f.Add([]byte("garbage"), []byte("x"), uint64(1), false)
	f.Fuzz(func(t *testing.T, block, data []byte, delivered uint64, noMeta bool) {
		hdr, err := nats.DecodeHeadersMsg(block)
		if err != nil {
			return // the client drops such a message before it is delivered
		}
		jm := wireMsg{header: hdr, data: bytes.Clone(data), delivered: delivered, noMeta: noMeta}
		msg, r := receive(&wmnats.NATSMarshaler{}, jm)
		if !bytes.Equal(msg.Payload, data) {
			t.Fatal("payload changed")
		}
		if r.hasInfo == noMeta {
			t.Fatal("delivery info without metadata, or lost")
		}
		if r.hasInfo && (r.info.Count != int(delivered) || r.info.Redelivered != (delivered > 1)) {
			t.Fatalf("delivered %d became %+v", delivered, r.info)
		}
		text, marked := delivery.DecodeError(msg)
		if !marked {
			for k, v := range hdr {
				if len(v) == 1 && k != wmnats.WatermillUUIDHdr && k != nats.MsgIdHdr && !isExpectHeader(k) && msg.Metadata.Get(k) != v[0] {
					t.Fatalf("header %q = %q became %q", k, v[0], msg.Metadata.Get(k))
				}
			}
			return
		}
		if text == "" {
			t.Fatal("marked without an error text")
		}
		for k := range msg.Metadata {
			if k != delivery.KeyDecodeError && k != delivery.KeyDecodeHeaders {
				t.Fatalf("marked message carries %q", k)
			}
		}
		if h, ok := msg.Metadata[delivery.KeyDecodeHeaders]; ok && !json.Valid([]byte(h)) {
			t.Fatalf("%s is not JSON: %q", delivery.KeyDecodeHeaders, h)
		}
		if !noMeta && msg.UUID == "" {
			t.Fatal("a marked JetStream message without a UUID")
		}
		again, _ := receive(&wmnats.NATSMarshaler{}, jm)
		if again.UUID != msg.UUID {
			t.Fatalf("UUID not stable: %q then %q", msg.UUID, again.UUID)
		}
	})
}

func isExpectHeader(k string) bool {
	switch k {
	case nats.ExpectedLastMsgIdHdr, nats.ExpectedStreamHdr, nats.ExpectedLastSubjSeqHdr, nats.ExpectedLastSeqHdr:
		return true
	}
	return false
}
