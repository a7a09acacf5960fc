package kafka

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
)

func record(headers ...[2]string) *sarama.ConsumerMessage {
	rec := &sarama.ConsumerMessage{Topic: "orders", Partition: 3, Offset: 42, Value: []byte("raw \x00 value")}
	for _, h := range headers {
		rec.Headers = append(rec.Headers, &sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
	}
	return rec
}

type unmarshalerFunc func(*sarama.ConsumerMessage) (*message.Message, error)

func (f unmarshalerFunc) Unmarshal(rec *sarama.ConsumerMessage) (*message.Message, error) {
	return f(rec)
}

func TestMarshalerRoundTrip(t *testing.T) {
	msg := message.NewMessage("uuid-1", []byte("payload"))
	msg.Metadata.Set("idempotency_key", "order-1")
	msg.Metadata.Set("tenant", "acme")
	pm, err := strictMarshaler{}.Marshal("orders", msg)
	require.NoError(t, err)
	rec := &sarama.ConsumerMessage{Topic: "orders", Value: []byte("payload")}
	for _, h := range pm.Headers {
		rec.Headers = append(rec.Headers, &sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	got, err := safeUnmarshaler{u: strictMarshaler{}}.Unmarshal(rec)
	require.NoError(t, err)
	require.Equal(t, "uuid-1", got.UUID)
	require.Equal(t, msg.Metadata, got.Metadata)
	require.Equal(t, "payload", string(got.Payload))
	_, bad := delivery.DecodeError(got)
	require.False(t, bad)
}

func TestUnmarshalWithoutUUIDHeaderGetsRecordID(t *testing.T) {
	got, err := safeUnmarshaler{u: strictMarshaler{}}.Unmarshal(record([2]string{"tenant", "acme"}))
	require.NoError(t, err)
	require.Equal(t, "kafka-orders-3-42", got.UUID, "stable across redeliveries of the record")
	require.Equal(t, "acme", got.Metadata.Get("tenant"))
}

func TestUndecodableRecordsAreMarkedNotFailed(t *testing.T) {
	cases := map[string]struct {
		u       wmkafka.Unmarshaler
		rec     *sarama.ConsumerMessage
		errText string
		uuid    string
	}{
		"duplicate header": {
			u:       strictMarshaler{},
			rec:     record([2]string{wmkafka.UUIDHeaderKey, "uuid-7"}, [2]string{"k", "a"}, [2]string{"k", "b"}),
			errText: `header "k" occurs more than once`,
			uuid:    "uuid-7",
		},
		"two UUID headers": {
			u:       strictMarshaler{},
			rec:     record([2]string{wmkafka.UUIDHeaderKey, "uuid-7"}, [2]string{wmkafka.UUIDHeaderKey, "uuid-8"}),
			errText: "occurs more than once",
			uuid:    "kafka-orders-3-42",
		},
		"error": {
			u:       unmarshalerFunc(func(*sarama.ConsumerMessage) (*message.Message, error) { return nil, errors.New("bad avro") }),
			rec:     record(),
			errText: "bad avro",
			uuid:    "kafka-orders-3-42",
		},
		"panic": {
			u:       unmarshalerFunc(func(*sarama.ConsumerMessage) (*message.Message, error) { panic("boom") }),
			rec:     record(),
			errText: "unmarshaler panicked: boom",
			uuid:    "kafka-orders-3-42",
		},
		"no message": {
			u:       unmarshalerFunc(func(*sarama.ConsumerMessage) (*message.Message, error) { return nil, nil }),
			rec:     record(),
			errText: "unmarshaler returned no message",
			uuid:    "kafka-orders-3-42",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := safeUnmarshaler{u: tc.u}.Unmarshal(tc.rec)
			require.NoError(t, err, "never fails: a failure would stop the partition's consumer")
			require.NotNil(t, got)
			text, bad := delivery.DecodeError(got)
			require.True(t, bad)
			require.Contains(t, text, tc.errText)
			require.Equal(t, tc.uuid, got.UUID)
			require.Equal(t, tc.rec.Value, []byte(got.Payload), "the raw value")
			if len(tc.rec.Headers) > 0 {
				var pairs [][2]string
				require.NoError(t, json.Unmarshal([]byte(got.Metadata.Get(delivery.KeyDecodeHeaders)), &pairs))
				require.Len(t, pairs, len(tc.rec.Headers))
				require.Len(t, got.Metadata, 2)
			} else {
				require.Len(t, got.Metadata, 1)
			}
		})
	}
}
