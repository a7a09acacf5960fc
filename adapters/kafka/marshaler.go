package kafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
)

// strictMarshaler is the default Marshaler and Unmarshaler of the Publisher
// and the Subscriber: watermill-kafka's DefaultMarshaler wire format (the
// message UUID in the _watermill_message_uuid header, every metadata entry
// a header, the payload as the record value), read strictly. Its
// Unmarshal fails on a header key that occurs more than once, which
// watermill-kafka's DefaultMarshaler would collapse into one value
// (keeping the last), losing the others without a word.
type strictMarshaler struct{}

var _ wmkafka.MarshalerUnmarshaler = strictMarshaler{}

// Marshal is watermill-kafka's DefaultMarshaler.Marshal.
func (strictMarshaler) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	return wmkafka.DefaultMarshaler{}.Marshal(topic, msg)
}

// Unmarshal reads a record written by Marshal (or by any producer that
// writes one header per key). A record without the UUID header gets the
// UUID recordID(record) from the Subscriber.
func (strictMarshaler) Unmarshal(rec *sarama.ConsumerMessage) (*message.Message, error) {
	seen := make(map[string]struct{}, len(rec.Headers))
	for _, h := range rec.Headers {
		if h == nil {
			continue
		}
		k := string(h.Key)
		if _, dup := seen[k]; dup {
			return nil, fmt.Errorf("header %q occurs more than once", k)
		}
		seen[k] = struct{}{}
	}
	return wmkafka.DefaultMarshaler{}.Unmarshal(rec)
}

// recordID returns "kafka-<topic>-<partition>-<offset>", the UUID the
// Subscriber gives a message whose record carries none: stable across
// redeliveries of the record, unique in the cluster.
func recordID(rec *sarama.ConsumerMessage) string {
	return "kafka-" + rec.Topic + "-" + strconv.FormatInt(int64(rec.Partition), 10) + "-" + strconv.FormatInt(rec.Offset, 10)
}

// safeUnmarshaler never fails: it hands a record that u cannot decode
// (an error, a panic, no message) out as a marked message, so that
// watermill-kafka neither stops the partition's consumer on it (and then
// reads it again, forever) nor skips it.
type safeUnmarshaler struct {
	u wmkafka.Unmarshaler
}

func (s safeUnmarshaler) Unmarshal(rec *sarama.ConsumerMessage) (*message.Message, error) {
	msg, err := decode(s.u, rec)
	if err != nil {
		return undecodable(rec, err), nil
	}
	if msg.UUID == "" {
		msg.UUID = recordID(rec)
	}
	return msg, nil
}

// decode runs u, turning a panic or a nil message into an error.
func decode(u wmkafka.Unmarshaler, rec *sarama.ConsumerMessage) (msg *message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, fmt.Errorf("unmarshaler panicked: %v", p)
		}
	}()
	msg, err = u.Unmarshal(rec)
	if err == nil && msg == nil {
		err = errors.New("unmarshaler returned no message")
	}
	return msg, err
}

// undecodable builds the marked message of a record that could not be
// decoded: the raw value as payload, the error (delivery.KeyDecodeError),
// the headers ("surely_decode_headers") as JSON, a list of [key, value]
// pairs in record order, when there were any; bytes that are not UTF-8 are
// replaced by U+FFFD in this copy. Its
// UUID is the Watermill UUID header when there is exactly one, else
// recordID.
func undecodable(rec *sarama.ConsumerMessage, err error) *message.Message {
	var id string
	var ids int
	var pairs [][2]string
	for _, h := range rec.Headers {
		if h == nil {
			continue
		}
		k, v := string(h.Key), string(h.Value)
		if k == wmkafka.UUIDHeaderKey {
			id, ids = v, ids+1
		}
		pairs = append(pairs, [2]string{k, v})
	}
	if ids != 1 || id == "" {
		id = recordID(rec)
	}
	msg := message.NewMessage(id, append([]byte(nil), rec.Value...))
	msg.Metadata.Set(delivery.KeyDecodeError, err.Error())
	if len(pairs) > 0 {
		if b, jerr := json.Marshal(pairs); jerr == nil {
			msg.Metadata.Set(delivery.KeyDecodeHeaders, string(b))
		}
	}
	return msg
}
