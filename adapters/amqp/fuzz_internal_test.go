package amqp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/delivery"
)

// fuzzTable builds an AMQP header table from fuzz bytes: each entry is a
// type selector, a key length, the key, then the value's bytes. It covers
// every type amqp091-go can decode from the wire, so x-delivery-count and
// the Watermill UUID header arrive with every type a broker or a foreign
// publisher may put there.
func fuzzTable(data []byte, depth int) amqp.Table {
	t := amqp.Table{}
	keys := []string{deliveryCountHeader, "_watermill_message_uuid", "k"}
	for len(data) >= 2 && len(t) < 8 {
		sel, kl := data[0], int(data[1])
		data = data[2:]
		var key string
		if kl < len(keys) {
			key = keys[kl]
		} else {
			kl = min(kl-len(keys), len(data))
			key, data = string(data[:kl]), data[kl:]
		}
		var u64 uint64
		if len(data) >= 8 {
			u64 = binary.LittleEndian.Uint64(data)
		}
		vl := min(int(sel>>4), len(data))
		raw := data[:vl]
		data = data[vl:]
		var v any
		switch sel % 18 {
		case 0:
			v = string(raw)
		case 1:
			v = bytes.Clone(raw)
		case 2:
			v = int8(u64)
		case 3:
			v = uint8(u64)
		case 4:
			v = int16(u64)
		case 5:
			v = uint16(u64)
		case 6:
			v = int32(u64)
		case 7:
			v = uint32(u64)
		case 8:
			v = int64(u64)
		case 9:
			v = math.Float32frombits(uint32(u64))
		case 10:
			v = math.Float64frombits(u64)
		case 11:
			v = u64&1 == 1
		case 12:
			v = amqp.Decimal{Scale: uint8(u64), Value: int32(u64 >> 8)}
		case 13:
			v = time.Unix(int64(u64>>20), 0)
		case 14:
			if depth < 2 {
				v = fuzzTable(raw, depth+1)
			}
		case 15:
			v = []any{string(raw), int32(u64)}
		case 16:
			v = nil
		case 17:
			v = int(u64)
		}
		t[key] = v
	}
	return t
}

// FuzzReceive decodes untrusted AMQP deliveries with the default
// marshaler. receive must never panic and never lose the body; the
// delivery count must be sane whatever type x-delivery-count has and never
// reach the metadata; an undecodable delivery must be marked, carry only
// the marker keys with its headers as valid JSON, and keep a stable UUID.
func FuzzReceive(f *testing.F) {
	f.Add([]byte("payload"), true, "", []byte{8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0x20, 2, 'v', 'a', 'l'})
	f.Add([]byte("payload"), true, "m-1", []byte{6, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Add([]byte{}, false, "", []byte{0x30, 1, 'a', 'b', 'c'})
	f.Add([]byte("\x00\xff"), true, "", []byte{10, 5, 'k', '\x00', 0xff, 'x', 'y', 0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	f.Add([]byte("x"), true, "", []byte{0x8e, 2, 0x8e, 4, 'k', 'e', 'y', '1', 0x20, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("x"), true, "", []byte{13, 2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("x"), true, "", []byte{9, 7, 0xc3, 0x28, 0xff, 0xfe, 'a', 'b', 'c', 0, 0, 0xc0, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte, redelivered bool, messageID string, headers []byte) {
		table := fuzzTable(headers, 0)
		before, _ := json.Marshal(table)
		d := amqp.Delivery{Redelivered: redelivered, MessageId: messageID, Body: bytes.Clone(body), Headers: table}
		u := defaultMarshaler()
		msg, info := receive(u, d)

		if after, _ := json.Marshal(table); !bytes.Equal(before, after) {
			t.Fatal("receive changed the delivery's header table")
		}
		if !bytes.Equal(msg.Payload, body) {
			t.Fatal("body changed")
		}
		if _, ok := msg.Metadata[deliveryCountHeader]; ok {
			t.Fatal("x-delivery-count reached the metadata")
		}
		switch {
		case !redelivered && info.Count != 1:
			t.Fatalf("first delivery counted %d", info.Count)
		case redelivered && info.Count != 0 && (info.Count < 2 || info.Count > 1<<31):
			t.Fatalf("redelivery counted %d", info.Count)
		}
		if info.Redelivered != redelivered {
			t.Fatal("redelivered flag lost")
		}
		text, marked := delivery.DecodeError(msg)
		if !marked {
			return
		}
		if text == "" || msg.UUID == "" {
			t.Fatalf("marked message without an error text (%q) or UUID (%q)", text, msg.UUID)
		}
		for k := range msg.Metadata {
			if k != delivery.KeyDecodeError && k != delivery.KeyDecodeHeaders {
				t.Fatalf("marked message carries %q", k)
			}
		}
		if h, ok := msg.Metadata[delivery.KeyDecodeHeaders]; ok {
			if !json.Valid([]byte(h)) {
				t.Fatalf("%s is not JSON: %q", delivery.KeyDecodeHeaders, h)
			}
			var m map[string]any
			if json.Unmarshal([]byte(h), &m) == nil {
				if _, ok := m[deliveryCountHeader]; ok {
					t.Fatal("x-delivery-count kept in the raw headers")
				}
			}
		}
		again, _ := receive(u, d)
		if again.UUID != msg.UUID {
			t.Fatalf("UUID not stable: %q then %q", msg.UUID, again.UUID)
		}
	})
}

// TestUndecodableHeadersAreAlwaysJSON: headers that encoding/json refuses
// (a timestamp past year 9999, NaN) and that hold bytes that are not UTF-8
// used to be written as a Go-quoted string, which is not JSON (found by
// FuzzReceive). They are now a JSON string of their text form.
func TestUndecodableHeadersAreAlwaysJSON(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]amqp.Table{
		"far timestamp":  {"00\xff": amqp.Decimal{}, "k": time.Unix(1<<44, 0)},
		"NaN in a table": {"k\x00": amqp.Table{"f": math.NaN()}, "v": "\xc3\x28"},
	} {
		msg, _ := receive(defaultMarshaler(), amqp.Delivery{Body: []byte("b"), Headers: h})
		if _, marked := delivery.DecodeError(msg); !marked {
			t.Fatalf("%s: not marked undecodable", name)
		}
		if raw := msg.Metadata.Get(delivery.KeyDecodeHeaders); !json.Valid([]byte(raw)) {
			t.Fatalf("%s: %s is not JSON: %q", name, delivery.KeyDecodeHeaders, raw)
		}
	}
}
