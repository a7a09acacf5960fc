package replay_test

import (
	"sync"
	"testing"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/testbroker"
)

// timedPublisher records when each publish started.
type timedPublisher struct {
	message.Publisher
	mu    sync.Mutex
	times []time.Time
}

func (p *timedPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.times = append(p.times, time.Now())
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

// 5,000 archived messages replayed at 500/s through an embedded NATS
// JetStream server: the publishes span at least 9.5s (4,999 intervals of
// 2ms), and each message arrives once on its original topic with its
// original UUID and key.
func TestReplayThroughNATS(t *testing.T) {
	t.Parallel()
	const (
		n     = 5000
		rate  = 500
		topic = "orders"
	)
	url := testbroker.EmbeddedNATS(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, surelynats.EnsureStream(t.Context(), nc, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{topic}}))

	began := time.Now()
	a, err := memarchive.New()
	require.NoError(t, err)
	at := time.Now().Add(-time.Minute)
	for i := range n {
		src := source(i)
		env := dlq.Wrap(src, dlq.Failure{Reason: dlq.ReasonExhausted, Topic: topic, Retention: time.Hour, At: at,
			OperationKey: src.Metadata.Get(idempotency.DefaultMetadataKey)}, nil, "", "")
		require.NoError(t, a.Publish("dead-letters", env))
	}

	t.Logf("setup: %v", time.Since(began))
	np, err := surelynats.NewPublisher(url)
	require.NoError(t, err)
	defer func() { require.NoError(t, np.Close()) }()
	pub := &timedPublisher{Publisher: np}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, replay.WithID("e2e"), replay.WithRate(rate), replay.WithConcurrency(4))
	require.NoError(t, err)
	require.Equal(t, n, res.Replayed)
	require.Equal(t, archive.RunDone, res.State)

	pub.mu.Lock()
	times := append([]time.Time(nil), pub.times...)
	pub.mu.Unlock()
	require.Len(t, times, n)
	first, last := times[0], times[0]
	for _, ts := range times {
		if ts.Before(first) {
			first = ts
		}
		if ts.After(last) {
			last = ts
		}
	}
	span := last.Sub(first)
	t.Logf("%d publishes in %v: %.1f msg/s (target %d/s; replay.Summary.Rate %.1f)", n, span, float64(n-1)/span.Seconds(), rate, res.Rate)
	require.GreaterOrEqual(t, span, 9500*time.Millisecond, "the rate limit held")

	began = time.Now()
	// Read the stream back: every message once, on the topic, with its
	// original UUID and key (decoded as a subscriber would).
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.OrderedConsumer(t.Context(), "ORDERS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{topic}})
	require.NoError(t, err)
	seen := map[string]string{}
	var unmarshal wmnats.NATSMarshaler
	for len(seen) < n {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		got := 0
		for jm := range batch.Messages() {
			got++
			require.Equal(t, topic, jm.Subject())
			m, err := unmarshal.Unmarshal(&nats.Msg{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
			require.NoError(t, err)
			_, dup := seen[m.UUID]
			require.False(t, dup, "message %s stored twice", m.UUID)
			seen[m.UUID] = m.Metadata.Get(idempotency.DefaultMetadataKey)
			require.Equal(t, "e2e", m.Metadata.Get(dlq.KeyReplayID))
		}
		require.NoError(t, batch.Error())
		require.Positive(t, got, "only %d of %d messages in the stream", len(seen), n)
	}
	for i := range n {
		src := source(i)
		require.Equal(t, src.Metadata.Get(idempotency.DefaultMetadataKey), seen[src.UUID], "message %s", src.UUID)
	}
	t.Logf("read back: %v", time.Since(began))
	st, err := js.Stream(t.Context(), "ORDERS")
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, uint64(n), info.State.Msgs, "no extra copy")
}
