package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/surely-dev/surely/delivery"
)

// received is one delivery as the broker handed it out, and what surely's
// middleware asked for it. It is the delivery.Control of the message.
type received struct {
	msg     jetstream.Msg
	info    delivery.Info
	hasInfo bool
	delay   atomic.Int64 // NackAfter's delay in ns; 0 for an immediate nak
}

var _ delivery.Control = (*received)(nil)

// NackAfter makes the nack that follows a NakWithDelay(d).
func (r *received) NackAfter(d time.Duration) bool {
	r.delay.Store(int64(max(d, 0)))
	return true
}

// Extend sends InProgress, restarting the server's AckWait for this
// delivery. The server does not answer it; an error means it was not sent.
func (r *received) Extend(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.msg.InProgress()
}

// ackTimeout bounds the wait for the server's confirmation of an ack.
const ackTimeout = 5 * time.Second

// ack acks and waits for the server's confirmation.
func (r *received) ack() error {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	return r.msg.DoubleAck(ctx)
}

// nak nacks, with the delay NackAfter asked for.
func (r *received) nak() error {
	if d := time.Duration(r.delay.Load()); d > 0 {
		return r.msg.NakWithDelay(d)
	}
	return r.msg.Nak()
}

// receive decodes one delivery with u into a Watermill message and the
// delivery's facts. It never fails: a message that cannot be decoded (an
// error, a panic, or no message) becomes a marked message.
func receive(u wmnats.Unmarshaler, jm jetstream.Msg) (*message.Message, *received) {
	r := &received{msg: jm}
	meta, merr := jm.Metadata()
	if merr == nil {
		r.info = delivery.Info{Count: int(meta.NumDelivered), Redelivered: meta.NumDelivered > 1}
		r.hasInfo = true
	} else {
		meta = nil
	}
	raw := &nats.Msg{Subject: jm.Subject(), Reply: jm.Reply(), Header: jm.Headers(), Data: jm.Data()}
	msg, err := decode(u, raw)
	if err != nil {
		msg = undecodable(raw, meta, err)
	}
	return msg, r
}

// decode runs u on a copy of raw, turning a panic or a nil message into an
// error.
func decode(u wmnats.Unmarshaler, raw *nats.Msg) (msg *message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, fmt.Errorf("unmarshaler panicked: %v", p)
		}
	}()
	in := *raw
	msg, err = u.Unmarshal(&in)
	if err == nil && msg == nil {
		err = errors.New("unmarshaler returned no message")
	}
	return msg, err
}

// undecodable builds the marked message for a NATS message that could not
// be decoded: the raw payload, the error, and the raw headers as JSON. Its
// UUID is the Watermill UUID header when present, else
// "nats-<stream>-<stream sequence>", stable across redeliveries.
func undecodable(raw *nats.Msg, meta *jetstream.MsgMetadata, err error) *message.Message {
	id := raw.Header.Get(wmnats.WatermillUUIDHdr)
	if id == "" && meta != nil {
		id = fmt.Sprintf("nats-%s-%d", meta.Stream, meta.Sequence.Stream)
	}
	msg := message.NewMessage(id, append([]byte(nil), raw.Data...))
	msg.Metadata.Set(delivery.KeyDecodeError, err.Error())
	if len(raw.Header) > 0 {
		if b, jerr := json.Marshal(raw.Header); jerr == nil {
			msg.Metadata.Set(delivery.KeyDecodeHeaders, string(b))
		}
	}
	return msg
}
