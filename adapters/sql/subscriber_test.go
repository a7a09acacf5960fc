package sql_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelysql "github.com/surely-dev/surely/adapters/sql"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/internal/testsql"
)

// receive waits for the next message of ch.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "channel closed")
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
		return nil
	}
}

func TestConstructors(t *testing.T) {
	t.Parallel()
	_, err := surelysql.NewSubscriber(nil, "g")
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	_, err = surelysql.NewPublisher(nil)
	require.ErrorIs(t, err, delivery.ErrInvalidOption)
	require.ErrorIs(t, surelysql.InitializeSchema(t.Context(), nil), delivery.ErrInvalidOption)

	db, err := testsql.OpenPostgres("postgres://127.0.0.1:1/none") // never dialled
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	for name, opts := range map[string][]delivery.Option{
		"ack wait below 100ms":             {delivery.WithAckWait(99 * time.Millisecond)},
		"poll interval below 1ms":          {surelysql.WithPollInterval(0)},
		"negative resend interval":         {delivery.WithResendInterval(-time.Second)},
		"resend interval below 1ms":        {delivery.WithResendInterval(time.Microsecond)},
		"batch size 0":                     {surelysql.WithBatchSize(0)},
		"negative close timeout":           {delivery.WithCloseTimeout(-time.Second)},
		"a shared option it does not take": {delivery.WithConcurrency(2)},
		// An option of no adapter's Subscriber.
		"an option it does not take": {options.Func[options.Delivery](func(s *options.Set) error { s.Put("WithChannels", 2); return nil })},
	} {
		_, err := surelysql.NewSubscriber(db, "g", opts...)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, name)
	}
	_, err = surelysql.NewSubscriber(db, "g", delivery.WithResendInterval(time.Microsecond))
	require.ErrorContains(t, err, "sql.NewSubscriber: WithResendInterval(1µs) is below 1ms")
	_, err = surelysql.NewSubscriber(db, "g", delivery.WithConcurrency(2))
	require.ErrorContains(t, err, "sql.NewSubscriber does not take option WithConcurrency")
	for _, group := range []string{"", strings.Repeat("g", 256)} {
		_, err := surelysql.NewSubscriber(db, group)
		require.ErrorIs(t, err, delivery.ErrInvalidOption, "consumer group %q", group)
	}
	sub, err := surelysql.NewSubscriber(db, "g", delivery.WithAckWait(time.Minute), surelysql.WithPollInterval(time.Second),
		delivery.WithResendInterval(time.Second), surelysql.WithBatchSize(10), delivery.WithCloseTimeout(time.Second),
		delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err, "every option the Subscriber takes")
	require.NoError(t, sub.Close())

	// The Publisher takes only a logger: a Subscriber's option is refused.
	for _, o := range []delivery.Option{delivery.WithAckWait(time.Minute), surelysql.WithBatchSize(2), delivery.WithCloseTimeout(time.Second)} {
		_, err = surelysql.NewPublisher(db, o)
		require.ErrorIs(t, err, delivery.ErrInvalidOption)
		require.ErrorContains(t, err, "sql.NewPublisher does not take option")
	}
	pub, err := surelysql.NewPublisher(db, delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, pub.Close())
}

// TestOffsetsFollowAcks: the group resumes after the last acked message; a
// message handed out but never acked stays; a message acked while Close
// waits for it is committed.
func TestOffsetsFollowAcks(t *testing.T) {
	t.Parallel()
	db := testsql.Postgres(t)
	topic := randomTopic()
	createTopic(t, db, topic)
	pub, err := surelysql.NewPublisher(db)
	require.NoError(t, err)
	defer func() { require.NoError(t, pub.Close()) }()
	for _, id := range []string{"m1", "m2", "m3"} {
		require.NoError(t, pub.Publish(topic, message.NewMessage(id, []byte(id))))
	}
	newSub := func() (*surelysql.Subscriber, <-chan *message.Message) {
		sub, err := surelysql.NewSubscriber(db, "billing",
			testOptions(delivery.WithAckWait(10*time.Second), delivery.WithCloseTimeout(300*time.Millisecond))...)
		require.NoError(t, err)
		ch, err := sub.Subscribe(context.Background(), topic)
		require.NoError(t, err)
		return sub, ch
	}

	sub, ch := newSub()
	m1 := receive(t, ch)
	require.Equal(t, "m1", m1.UUID)
	_, ok := wmsql.TxFromContext(m1.Context())
	require.True(t, ok, "the consuming transaction is in the message context")
	_, ok = delivery.ControlFrom(m1.Context())
	require.True(t, ok, "and the delivery's Control")
	m1.Ack()
	m2 := receive(t, ch)
	require.Equal(t, "m2", m2.UUID)
	require.NoError(t, sub.Close()) // m2 never acked: given up after the close timeout
	select {
	case <-m2.Context().Done():
	default:
		t.Fatal("the abandoned message's context must be cancelled")
	}

	sub, ch = newSub()
	m2 = receive(t, ch)
	require.Equal(t, "m2", m2.UUID, "an unacked message is not committed")
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	time.Sleep(100 * time.Millisecond)
	m2.Ack() // while Close waits
	require.NoError(t, <-closed)

	sub, ch = newSub()
	m3 := receive(t, ch)
	require.Equal(t, "m3", m3.UUID, "the message acked during Close was committed")
	m3.Ack()
	require.NoError(t, sub.Close())
}

// TestAckWait: a delivery that is neither settled nor extended within the
// ack wait is given up: its handler's context is cancelled, its
// transaction rolled back, and the message handed out again.
func TestAckWait(t *testing.T) {
	t.Parallel()
	db := testsql.Postgres(t)
	topic := randomTopic()
	createTopic(t, db, topic)
	pub, err := surelysql.NewPublisher(db)
	require.NoError(t, err)
	defer func() { require.NoError(t, pub.Close()) }()
	require.NoError(t, pub.Publish(topic, message.NewMessage("m1", []byte("m1"))))
	// Extensions every 100ms keep a 1s deadline with 900ms to spare for a
	// loaded machine's scheduling delays.
	const deadline = time.Second
	sub, err := surelysql.NewSubscriber(db, "billing", testOptions(delivery.WithAckWait(deadline))...)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)

	first := receive(t, ch)
	c, ok := delivery.ControlFrom(first.Context())
	require.True(t, ok)
	for received := time.Now(); time.Since(received) < deadline*3/2; { // kept past its deadline by extensions
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, c.Extend(t.Context()))
	}
	require.NoError(t, first.Context().Err())
	start := time.Now()
	second := receive(t, ch)
	require.GreaterOrEqual(t, time.Since(start), deadline/2, "given up only when the deadline since the last extension passed")
	require.Equal(t, "m1", second.UUID, "handed out again")
	require.Error(t, first.Context().Err(), "the given-up delivery's context is cancelled")
	require.ErrorIs(t, c.Extend(t.Context()), surelysql.ErrDeliveryExpired)
	second.Ack()
}

func TestSubscribeWithoutTables(t *testing.T) {
	t.Parallel()
	db := testsql.Postgres(t)
	sub, err := surelysql.NewSubscriber(db, "g", testOptions()...)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	_, err = sub.Subscribe(context.Background(), randomTopic())
	require.ErrorContains(t, err, "InitializeSchema")
	_, err = sub.Subscribe(context.Background(), "bad topic")
	require.ErrorIs(t, err, surelysql.ErrInvalidTopic)
	pub, err := surelysql.NewPublisher(db)
	require.NoError(t, err)
	require.ErrorContains(t, pub.Publish(randomTopic(), message.NewMessage("x", nil)), "InitializeSchema")
	require.NoError(t, pub.Close())
}
