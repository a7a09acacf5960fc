package sqs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// recorder records ChangeMessageVisibility calls and fails them on demand.
type recorder struct {
	mu    sync.Mutex
	calls []*awssqs.ChangeMessageVisibilityInput
	err   error
}

func (r *recorder) ChangeMessageVisibility(_ context.Context, in *awssqs.ChangeMessageVisibilityInput,
	_ ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, in)
	return &awssqs.ChangeMessageVisibilityOutput{}, r.err
}

func (r *recorder) timeouts() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int32
	for _, c := range r.calls {
		out = append(out, c.VisibilityTimeout)
	}
	return out
}

func TestReceiveInputAsksForTheReceiveCount(t *testing.T) {
	cfg, err := newSubscriberConfig(aws.Config{Credentials: aws.AnonymousCredentials{}}, nil)
	require.NoError(t, err)
	in, err := cfg.receiveInput()(t.Context(), "http://q/1/orders")
	require.NoError(t, err)
	require.Equal(t, "http://q/1/orders", aws.ToString(in.QueueUrl))
	require.Contains(t, in.MessageSystemAttributeNames, types.MessageSystemAttributeNameApproximateReceiveCount)
	require.Equal(t, []string{"All"}, in.MessageAttributeNames)
	require.EqualValues(t, 1, in.MaxNumberOfMessages, "a nack drops the rest of a batch in watermill-aws")
	require.EqualValues(t, 20, in.WaitTimeSeconds)
	require.EqualValues(t, 30, in.VisibilityTimeout)
	require.Equal(t, "30", cfg.queueAttributes().VisibilityTimeout)
}

func TestReceiveCount(t *testing.T) {
	for _, tc := range []struct {
		attr string
		want delivery.Info
		ok   bool
	}{
		{"1", delivery.Info{Count: 1}, true},
		{"2", delivery.Info{Count: 2, Redelivered: true}, true},
		{"17", delivery.Info{Count: 17, Redelivered: true}, true},
		{"", delivery.Info{}, false},
		{"0", delivery.Info{}, false},
		{"-3", delivery.Info{}, false},
		{"x", delivery.Info{}, false},
	} {
		m := &types.Message{ReceiptHandle: aws.String("rh"), Attributes: map[string]string{}}
		if tc.attr != "" {
			m.Attributes[receiveCountAttribute] = tc.attr
		}
		r := newReceived(m)
		require.Equal(t, tc.ok, r.hasInfo, tc.attr)
		require.Equal(t, tc.want, r.info, tc.attr)
		require.Equal(t, "rh", r.receipt)
	}
}

func newTestReceived(rec *recorder) *received {
	r := newReceived(&types.Message{ReceiptHandle: aws.String("rh-1")})
	r.client, r.queueURL, r.visibility = rec, "http://q/1/orders", 45*time.Second
	return r
}

func TestExtendSetsTheVisibilityTimeout(t *testing.T) {
	rec := &recorder{}
	r := newTestReceived(rec)
	require.NoError(t, r.Extend(t.Context()))
	require.NoError(t, r.Extend(t.Context()))
	require.Equal(t, []int32{45, 45}, rec.timeouts())
	require.Equal(t, "rh-1", aws.ToString(rec.calls[0].ReceiptHandle))
	require.Equal(t, "http://q/1/orders", aws.ToString(rec.calls[0].QueueUrl))

	rec.err = errors.New("boom")
	require.ErrorIs(t, r.Extend(t.Context()), rec.err)
}

func TestNackSetsTheDelay(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		set   bool
		want  int32
	}{
		{0, false, 0},
		{500 * time.Millisecond, true, 1},
		{time.Second, true, 1},
		{1500 * time.Millisecond, true, 2},
		{-time.Second, true, 0},
		{24 * time.Hour, true, 43200},
	} {
		rec := &recorder{}
		r := newTestReceived(rec)
		if tc.set {
			require.True(t, r.NackAfter(tc.delay))
		}
		require.NoError(t, r.nack(t.Context()))
		require.Equal(t, []int32{tc.want}, rec.timeouts(), "delay %v", tc.delay)
		require.ErrorIs(t, r.Extend(t.Context()), errSettled, "no extension after the nack")
		require.Len(t, rec.calls, 1)
	}
}

func TestExtendAfterAckFails(t *testing.T) {
	rec := &recorder{}
	r := newTestReceived(rec)
	r.acked()
	require.ErrorIs(t, r.Extend(t.Context()), errSettled)
	require.Empty(t, rec.calls)
}

func str(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}

func TestUnmarshalerMarksUndecodableMessages(t *testing.T) {
	failing := unmarshalFunc(func(*types.Message) (*message.Message, error) { return nil, errors.New("bad payload") })
	panicking := unmarshalFunc(func(*types.Message) (*message.Message, error) { panic("oops") })
	none := unmarshalFunc(func(*types.Message) (*message.Message, error) { return nil, nil })
	for _, tc := range []struct {
		name   string
		u      *unmarshaler
		attrs  map[string]types.MessageAttributeValue
		wantID string
		errHas string
	}{
		{"binary uuid", &unmarshaler{inner: wmsqs.DefaultMarshalerUnmarshaler{}, strict: true},
			map[string]types.MessageAttributeValue{wmsqs.UUIDAttribute: {DataType: aws.String("Binary"), BinaryValue: []byte{1}}},
			"sqs-id", "not String"},
		{"no data type", &unmarshaler{inner: wmsqs.DefaultMarshalerUnmarshaler{}, strict: true},
			map[string]types.MessageAttributeValue{"k": {StringValue: aws.String("v")}, wmsqs.UUIDAttribute: str("u-1")},
			"u-1", `"k"`},
		{"no string value", &unmarshaler{inner: wmsqs.DefaultMarshalerUnmarshaler{}, strict: true},
			map[string]types.MessageAttributeValue{"k": {DataType: aws.String("Number")}},
			"sqs-id", "no string value"},
		{"custom type", &unmarshaler{inner: wmsqs.DefaultMarshalerUnmarshaler{}, strict: true},
			map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String.json"), StringValue: aws.String("{}")}},
			"sqs-id", "String.json"},
		{"error", &unmarshaler{inner: failing}, nil, "sqs-id", "bad payload"},
		{"panic", &unmarshaler{inner: panicking}, nil, "sqs-id", "oops"},
		{"no message", &unmarshaler{inner: none}, nil, "sqs-id", "no message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.u.pending = &pending{}
			m := &types.Message{MessageId: aws.String("sqs-id"), ReceiptHandle: aws.String("rh"),
				Body: aws.String("raw <body>"), MessageAttributes: tc.attrs,
				Attributes: map[string]string{receiveCountAttribute: "3"}}
			msg, err := tc.u.Unmarshal(m)
			require.NoError(t, err, "the unmarshaler never fails")
			require.Equal(t, tc.wantID, msg.UUID)
			require.Equal(t, []byte("raw <body>"), []byte(msg.Payload))
			e, ok := delivery.DecodeError(msg)
			require.True(t, ok)
			require.Contains(t, e, tc.errHas)
			for k := range msg.Metadata {
				require.Contains(t, []string{delivery.KeyDecodeError, delivery.KeyDecodeHeaders}, k)
			}
			if len(tc.attrs) > 0 {
				require.NotEmpty(t, msg.Metadata[delivery.KeyDecodeHeaders])
			}
			r := tc.u.pending.take(msg)
			require.NotNil(t, r, "the delivery facts are recorded for undecodable messages too")
			require.Equal(t, delivery.Info{Count: 3, Redelivered: true}, r.info)
		})
	}
}

func TestUnmarshalerDecodesWatermillMessages(t *testing.T) {
	u := &unmarshaler{inner: wmsqs.DefaultMarshalerUnmarshaler{}, strict: true, pending: &pending{}}
	m := &types.Message{MessageId: aws.String("sqs-id"), ReceiptHandle: aws.String("rh"), Body: aws.String("payload"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			wmsqs.UUIDAttribute: str("u-1"), "tenant": str("acme"),
			"n": {DataType: aws.String("Number"), StringValue: aws.String("7")},
			"b": {DataType: aws.String("Binary"), BinaryValue: []byte("bin")},
		}}
	msg, err := u.Unmarshal(m)
	require.NoError(t, err)
	require.Equal(t, "u-1", msg.UUID)
	require.Equal(t, "payload", string(msg.Payload))
	require.Equal(t, message.Metadata{"tenant": "acme", "n": "7", "b": "bin"}, msg.Metadata)
	r := u.pending.take(msg)
	require.NotNil(t, r)
	require.False(t, r.hasInfo, "no ApproximateReceiveCount: no Info")
	require.Nil(t, u.pending.take(msg), "taken once")
}

type unmarshalFunc func(*types.Message) (*message.Message, error)

func (f unmarshalFunc) Unmarshal(m *types.Message) (*message.Message, error) { return f(m) }

func TestOptionValidation(t *testing.T) {
	creds := aws.Config{Credentials: aws.AnonymousCredentials{}}
	for name, opts := range map[string][]delivery.Option{
		"visibility below 1s":       {delivery.WithAckWait(500 * time.Millisecond)},
		"visibility not whole":      {delivery.WithAckWait(1500 * time.Millisecond)},
		"visibility above 12h":      {delivery.WithAckWait(13 * time.Hour)},
		"wait time above 20s":       {WithWaitTime(21 * time.Second)},
		"negative wait time":        {WithWaitTime(-time.Second)},
		"concurrency 0":             {delivery.WithConcurrency(0)},
		"nil marshaler":             {WithMarshaler(nil)},
		"nil client option":         {WithClientOptions(nil)},
		"zero close timeout":        {delivery.WithCloseTimeout(0)},
		"another package's marshal": {options.Func[options.Delivery](func(s *options.Set) error { s.Put("kafka.WithMarshaler", 1); return nil })},
		"a shared option not taken": {delivery.WithResendInterval(time.Second)},
	} {
		_, err := NewSubscriber(creds, opts...)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := NewSubscriber(aws.Config{})
	require.ErrorIs(t, err, delivery.ErrInvalidOption, "no credentials")
	_, err = NewPublisher(aws.Config{})
	require.ErrorIs(t, err, delivery.ErrInvalidOption, "no credentials")
	_, err = NewSubscriber(creds, delivery.WithAckWait(1500*time.Millisecond))
	require.ErrorContains(t, err, "sqs.NewSubscriber: WithAckWait(1.5s): not whole seconds")
	_, err = NewSubscriber(creds, delivery.WithAckWait(13*time.Hour))
	require.ErrorContains(t, err, "sqs.NewSubscriber: WithAckWait(13h0m0s) is not in 1s..12h0m0s")
	_, err = NewSubscriber(creds, options.Func[options.Delivery](func(s *options.Set) error { s.Put("kafka.WithMarshaler", 1); return nil }))
	require.ErrorContains(t, err, "sqs.NewSubscriber does not take option kafka.WithMarshaler")
	// Options of the Subscriber only: refused by the Publisher, not ignored.
	for _, o := range []delivery.Option{delivery.WithAckWait(time.Minute), WithWaitTime(time.Second), delivery.WithConcurrency(2),
		delivery.WithCloseTimeout(time.Second)} {
		_, err = NewPublisher(creds, o)
		require.ErrorIs(t, err, delivery.ErrInvalidOption)
		require.ErrorContains(t, err, "sqs.NewPublisher does not take option")
	}

	got, err := newSubscriberConfig(creds, []delivery.Option{delivery.WithConcurrency(4), WithWaitTime(5 * time.Second),
		WithMarshaler(wmsqs.DefaultMarshalerUnmarshaler{}), delivery.WithCloseTimeout(time.Second)})
	require.NoError(t, err)
	require.Equal(t, 4, got.concurrency)
	require.Equal(t, 5*time.Second, got.waitTime)
	require.Equal(t, 30*time.Second, got.visibility, "the default")
	require.Equal(t, time.Second, got.closeTimeout)
	require.NotNil(t, got.unmarshaler)
	got, err = newSubscriberConfig(creds, nil)
	require.NoError(t, err)
	require.Nil(t, got.unmarshaler, "the default: checked attributes")
	require.Equal(t, 30*time.Second, got.closeTimeout)
	require.Equal(t, 1, got.concurrency)
}

// The default marshaler sends the payload and the metadata as SQS text:
// what SQS would refuse (or an emulator change) is refused before sending.
func TestSQSText(t *testing.T) {
	for s, ok := range map[string]bool{
		`{"order":1}`: true, "tab\tnew\nline\r": true, "évènement €": true, "\U0001F600": true, "": true,
		"\x00": false, "\x1f": false, "\xff\xfe": false, "\uFFFE": false,
	} {
		require.Equal(t, ok, isSQSText(s), "%q", s)
	}
	require.NoError(t, sqsText(message.NewMessage("u", []byte("pay")).Copy()))
	require.ErrorContains(t, sqsText(message.NewMessage("u", []byte{0, 0xff})), "payload is not text")
	m := message.NewMessage("u", []byte("pay"))
	m.Metadata.Set("k", "\x01")
	require.ErrorContains(t, sqsText(m), `metadata "k"`)
}
