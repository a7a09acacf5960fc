package redisstream_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	surelyredis "github.com/surely-dev/surely/adapters/redisstream"
	"github.com/surely-dev/surely/delivery"
)

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	opts := &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}} // never dialled
	for name, c := range map[string]struct {
		group string
		opts  []delivery.Option
	}{
		"no group":             {"", nil},
		"empty consumer":       {"g", []delivery.Option{surelyredis.WithConsumer("")}},
		"ack wait too short":   {"g", []delivery.Option{delivery.WithAckWait(time.Millisecond)}},
		"zero claim interval":  {"g", []delivery.Option{surelyredis.WithClaimInterval(0)}},
		"claim beyond ack":     {"g", []delivery.Option{delivery.WithAckWait(time.Second), surelyredis.WithClaimInterval(2 * time.Second)}},
		"claim beyond default": {"g", []delivery.Option{surelyredis.WithClaimInterval(time.Minute)}},
		"zero resend interval": {"g", []delivery.Option{delivery.WithResendInterval(0)}},
		"negative resend":      {"g", []delivery.Option{delivery.WithResendInterval(-time.Second)}},
		"nil marshaler":        {"g", []delivery.Option{surelyredis.WithMarshaler(nil)}},
		"nil logger":           {"g", []delivery.Option{delivery.WithLogger(nil)}},
		"zero close timeout":   {"g", []delivery.Option{delivery.WithCloseTimeout(0)}},
		"publisher's option":   {"g", []delivery.Option{delivery.WithConcurrency(2)}},
	} {
		_, err := surelyredis.NewSubscriber(opts, c.group, c.opts...)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	for name, opt := range map[string]delivery.Option{
		"nil marshaler":         surelyredis.WithMarshaler(nil),
		"subscriber's ack wait": delivery.WithAckWait(time.Second),
		"subscriber's consumer": surelyredis.WithConsumer("c"),
		"nothing to wait for":   delivery.WithCloseTimeout(time.Second),
	} {
		_, err := surelyredis.NewPublisher(opts, opt)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err := surelyredis.NewPublisher(opts, surelyredis.WithConsumer("c"))
	require.ErrorContains(t, err, "redisstream.NewPublisher does not take option redisstream.WithConsumer")
	_, err = surelyredis.NewSubscriber(opts, "g", delivery.WithConcurrency(2))
	require.ErrorContains(t, err, "redisstream.NewSubscriber does not take option WithConcurrency")
	_, err = surelyredis.NewSubscriber(opts, "g", delivery.WithAckWait(time.Millisecond))
	require.ErrorContains(t, err, "redisstream.NewSubscriber: WithAckWait(1ms) is below 100ms")
	_, err = surelyredis.NewSubscriber(nil, "g")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelyredis.NewPublisher(nil)
	require.ErrorIs(t, err, delivery.ErrInvalidOption)

	pub, err := surelyredis.NewPublisher(opts, surelyredis.WithMarshaler(wmredis.DefaultMarshallerUnmarshaller{}),
		delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, pub.Close())
	sub, err := surelyredis.NewSubscriber(opts, "g", surelyredis.WithConsumer("c"), delivery.WithAckWait(time.Second),
		surelyredis.WithClaimInterval(time.Second), delivery.WithResendInterval(time.Millisecond),
		surelyredis.WithMarshaler(wmredis.DefaultMarshallerUnmarshaller{}),
		delivery.WithLogger(slog.New(slog.DiscardHandler)), delivery.WithCloseTimeout(time.Second))
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	require.NoError(t, sub.Close(), "Close twice")
	_, err = sub.Subscribe(t.Context(), "orders")
	require.ErrorIs(t, err, delivery.ErrClosed)
}

// fixture is one stream on the shared Redis with a publisher.
type fixture struct {
	srv    server
	stream string
	pub    *surelyredis.Publisher
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{srv: redisServer(t)}
	f.stream = f.srv.newStream(t)
	var err error
	f.pub, err = surelyredis.NewPublisher(f.srv.opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.pub.Close()) })
	return f
}

func (f *fixture) subscribe(t *testing.T, group string, opts ...delivery.Option) (*surelyredis.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := surelyredis.NewSubscriber(f.srv.opts, group, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	ch, err := sub.Subscribe(t.Context(), f.stream)
	require.NoError(t, err)
	return sub, ch
}

func (f *fixture) pending(t *testing.T, group string) []redis.XPendingExt {
	t.Helper()
	p, err := f.srv.admin.XPendingExt(t.Context(), &redis.XPendingExtArgs{
		Stream: f.stream, Group: group, Start: "-", End: "+", Count: 10,
	}).Result()
	require.NoError(t, err)
	return p
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-ch:
		require.NotNil(t, m, "the channel closed")
		return m
	case <-time.After(15 * time.Second):
		t.Fatal("no message in 15s")
		return nil
	}
}

func info(t *testing.T, m *message.Message) delivery.Info {
	t.Helper()
	i, ok := delivery.InfoFrom(m.Context())
	require.True(t, ok, "no delivery.Info")
	return i
}

// A nack is an in-process resend in watermill-redisstream; the subscriber
// counts it in the pending entries list, so the count survives a claim by
// another consumer.
func TestNackCountsDeliveriesInThePendingList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	src := message.NewMessage(watermill.NewUUID(), []byte("pay 10"))
	src.Metadata.Set("tenant", "acme")
	require.NoError(t, f.pub.Publish(f.stream, src))
	_, ch := f.subscribe(t, "billing", surelyredis.WithConsumer("c1"))

	for want := 1; want <= 3; want++ {
		m := next(t, ch)
		require.Equal(t, delivery.Info{Count: want, Redelivered: want > 1}, info(t, m))
		require.Equal(t, src.UUID, m.UUID)
		require.Equal(t, "pay 10", string(m.Payload))
		require.Equal(t, message.Metadata{"tenant": "acme"}, m.Metadata, "no internal keys leak into the metadata")
		p := f.pending(t, "billing")
		require.Len(t, p, 1)
		require.Equal(t, "c1", p[0].Consumer)
		require.EqualValues(t, want, p[0].RetryCount, "the pending list counts every delivery")
		if want < 3 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	require.Eventually(t, func() bool { return len(f.pending(t, "billing")) == 0 }, 5*time.Second, 10*time.Millisecond)
}

// An entry left pending by a consumer that went away is claimed by another
// after the ack wait, and delivered with the pending list's count.
func TestClaimedEntryCarriesItsDeliveryCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	require.NoError(t, f.pub.Publish(f.stream, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	// A consumer that reads the entry and dies.
	require.NoError(t, f.srv.admin.XGroupCreate(t.Context(), f.stream, "billing", "0").Err())
	require.NoError(t, f.srv.admin.XReadGroup(t.Context(), &redis.XReadGroupArgs{
		Group: "billing", Consumer: "dead", Streams: []string{f.stream, ">"}, Count: 1,
	}).Err())

	_, ch := f.subscribe(t, "billing", surelyredis.WithConsumer("heir"), delivery.WithAckWait(200*time.Millisecond))
	m := next(t, ch)
	require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, info(t, m))
	m.Ack()
}

// Extend keeps the entry this consumer owns; once another consumer claimed
// it, Extend reports so instead of stealing it back.
func TestExtendDoesNotStealAClaimedEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	require.NoError(t, f.pub.Publish(f.stream, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	_, ch := f.subscribe(t, "billing", surelyredis.WithConsumer("owner"))
	m := next(t, ch)
	c, ok := delivery.ControlFrom(m.Context())
	require.True(t, ok)
	// Idle is at least 100ms older than extended when Extend did not reset
	// it, and at most time.Since(extended) when it did, however slow the
	// machine (1ms for Redis rounding to milliseconds).
	time.Sleep(100 * time.Millisecond)
	extended := time.Now()
	require.NoError(t, c.Extend(t.Context()))
	p := f.pending(t, "billing")
	require.Len(t, p, 1)
	require.LessOrEqual(t, p[0].Idle, time.Since(extended)+time.Millisecond, "Extend reset the idle time")
	require.EqualValues(t, 1, p[0].RetryCount, "Extend does not count a delivery")

	require.NoError(t, f.srv.admin.XClaim(t.Context(), &redis.XClaimArgs{
		Stream: f.stream, Group: "billing", Consumer: "thief", Messages: []string{p[0].ID},
	}).Err())
	err := c.Extend(t.Context())
	require.ErrorIs(t, err, surelyredis.ErrClaimed)
	require.Equal(t, "thief", f.pending(t, "billing")[0].Consumer)
	m.Ack() // the work is done: acking the thief's claim loses nothing
	require.Eventually(t, func() bool { return len(f.pending(t, "billing")) == 0 }, 5*time.Second, 10*time.Millisecond)
	require.True(t, errors.Is(c.Extend(t.Context()), surelyredis.ErrNotPending))
}

// A malformed entry neither ends the subscription nor loops: it is handed
// out marked, with its raw fields, and the entries after it follow.
func TestMalformedEntryIsMarkedAndConsumingGoesOn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	require.NoError(t, f.srv.admin.XAdd(t.Context(), &redis.XAddArgs{Stream: f.stream, Values: map[string]any{
		"payload": "raw \x00 bytes", "metadata": "\xc1\xff", "note": "hi",
	}}).Err()) // no UUID field: watermill-redisstream's Unmarshal fails
	good := message.NewMessage(watermill.NewUUID(), []byte("good"))
	require.NoError(t, f.pub.Publish(f.stream, good))
	_, ch := f.subscribe(t, "billing")

	bad := next(t, ch)
	text, marked := delivery.DecodeError(bad)
	require.True(t, marked)
	require.Contains(t, text, wmredis.UUIDHeaderKey)
	id := bad.Metadata.Get(surelyredis.DecodeEntryIDKey)
	require.NotEmpty(t, id)
	require.Equal(t, "redis-"+id, bad.UUID)
	require.Equal(t, "raw \x00 bytes", string(bad.Payload))
	require.JSONEq(t, `{"metadata":{"base64":"wf8="},"note":"hi"}`, bad.Metadata.Get(surelyredis.DecodeFieldsKey))
	require.Equal(t, delivery.Info{Count: 1}, info(t, bad))
	bad.Ack()
	m := next(t, ch)
	require.Equal(t, good.UUID, m.UUID)
	m.Ack()
}

// NackAfter holds the message back for the delay, not the resend interval.
func TestNackAfterHoldsTheMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	require.NoError(t, f.pub.Publish(f.stream, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	_, ch := f.subscribe(t, "billing", delivery.WithResendInterval(time.Millisecond))
	m := next(t, ch)
	c, ok := delivery.ControlFrom(m.Context())
	require.True(t, ok)
	require.True(t, c.NackAfter(300*time.Millisecond))
	at := time.Now()
	m.Nack()
	select {
	case <-m.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the settled message's context was not cancelled")
	}
	m = next(t, ch)
	require.GreaterOrEqual(t, time.Since(at), 300*time.Millisecond)
	m.Ack()
}
