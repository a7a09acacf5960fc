package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/adapters/kafka"
	"github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/adapters/redisstream"
	surelysql "github.com/surely-dev/surely/adapters/sql"
	"github.com/surely-dev/surely/adapters/sqs"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/sqsemu"
	"github.com/surely-dev/surely/internal/testamqp"
	"github.com/surely-dev/surely/internal/testbroker"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// replayTo replays the fixture archive's four entries (with more, those
// that filter selects) to topic on the broker of brokerURL, and returns
// those it replayed.
func replayTo(t *testing.T, brokerURL, topic string, filter ...string) []failure {
	t.Helper()
	ar, aurl := sqliteArchive(t)
	fs := fill(t, ar)
	a := replayApp(t)
	args := append([]string{"dlq", "replay", "--archive", aurl, "--to", brokerURL, "--target", topic, "--rate", "0", "--yes"}, filter...)
	out, stderr, code := run(t, a, args...)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	if len(filter) == 0 {
		require.Contains(t, out, "replayed 4, refused 0")
		return fs
	}
	var sel []failure
	for _, f := range fs {
		if f.topic == "orders" {
			sel = append(sel, f)
		}
	}
	require.Contains(t, out, "replayed 3, refused 0")
	return sel
}

// consume receives topic's messages from sub, through the adapter's own
// subscriber, until each of fs came back as the original (UUID, payload,
// operation key, the replay's keys) and was acked.
func consume(t *testing.T, sub message.Subscriber, topic string, fs []failure) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	want := map[string]failure{}
	for _, f := range fs {
		want[f.uuid] = f
	}
	for len(want) > 0 {
		select {
		case m, ok := <-msgs:
			require.True(t, ok, "the subscription ended with %d replayed messages not consumed", len(want))
			f, ok := want[m.UUID]
			require.True(t, ok, "message %s is none of the replayed ones", m.UUID)
			assert.Equal(t, f.key, m.Metadata.Get(idempotency.DefaultMetadataKey), "operation key kept")
			assert.Equal(t, f.payload, []byte(m.Payload))
			assert.Equal(t, dlqID(f.uuid), m.Metadata.Get(dlq.KeyReplayOf))
			assert.NotEmpty(t, m.Metadata.Get(dlq.KeyReplayID))
			m.Ack()
			delete(want, m.UUID)
		case <-ctx.Done():
			t.Fatalf("%d replayed messages not consumed", len(want))
		}
	}
	require.NoError(t, sub.Close())
}

func randomTopic() string { return "surely_cli_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") }

func TestReplayToKafka(t *testing.T) {
	t.Parallel()
	topic := randomTopic()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	fs := replayTo(t, "kafka://"+strings.Join(brokers, ","), topic)
	sub, err := kafka.NewSubscriber(brokers, "replay-check")
	require.NoError(t, err)
	consume(t, sub, topic, fs)
}

// The SQS test points the SQS client at the in-process emulator, as an
// sqs:// URL with its endpoint; it changes sqsClientOptions, so it does not
// run in parallel.
func TestReplayToSQS(t *testing.T) {
	emu, err := sqsemu.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	sqsClientOptions = emu.ClientOptions()
	t.Cleanup(func() { sqsClientOptions = nil })
	topic := randomTopic()
	sub, err := sqs.NewSubscriber(sqsemu.AWSConfig(), sqs.WithClientOptions(emu.ClientOptions()...))
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(topic), "the queue exists before the replay: the publisher never creates one")
	// SQS carries text: the fixture's binary payload (topic shipments)
	// stays out; the SQS publisher would refuse it (TestSQSText).
	fs := replayTo(t, "sqs://"+sqsemu.Region+"?endpoint="+url.QueryEscape(emu.URL()), topic, "--topic", "orders")
	consume(t, sub, topic, fs)
}

func TestReplayToPostgres(t *testing.T) {
	t.Parallel()
	db := testsql.Postgres(t)
	topic := randomTopic()
	require.NoError(t, surelysql.InitializeSchema(t.Context(), db, topic))
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "watermill_`+topic+`", "watermill_offsets_`+topic+`"`)
	})
	fs := replayTo(t, testenv.URL(t, "SURELY_POSTGRES_URL"), topic)
	sub, err := surelysql.NewSubscriber(db, "replay-check")
	require.NoError(t, err)
	consume(t, sub, topic, fs)
}

func TestReplayToRedisStreams(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t)
	redisURL := testenv.URL(t, "SURELY_REDIS_URL")
	topic := randomTopic()
	t.Cleanup(func() { client.Del(context.Background(), topic) })
	fs := replayTo(t, redisURL, topic)
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	sub, err := redisstream.NewSubscriber(&redis.UniversalOptions{Addrs: []string{opts.Addr}, DB: opts.DB,
		Username: opts.Username, Password: opts.Password}, "replay-check")
	require.NoError(t, err)
	consume(t, sub, topic, fs)
}

func TestReplayToNATS(t *testing.T) {
	t.Parallel()
	natsURL := testbroker.EmbeddedNATS(t)
	topic := randomTopic()
	nc, err := natsgo.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nats.EnsureStream(t.Context(), nc, jetstream.StreamConfig{Name: strings.ToUpper(topic), Subjects: []string{topic}}))
	fs := replayTo(t, natsURL, topic)
	sub, err := nats.NewSubscriber(natsURL, "replay-check")
	require.NoError(t, err)
	consume(t, sub, topic, fs)
}

func TestReplayToRabbitMQ(t *testing.T) {
	t.Parallel()
	amqpURL := testamqp.URL(t)
	topic := randomTopic()
	t.Cleanup(func() {
		if conn, err := amqp091.Dial(amqpURL); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(topic, false, false, false)
			}
			_ = conn.Close()
		}
	})
	fs := replayTo(t, amqpURL, topic) // the publisher declares the missing queue as surely's
	sub, err := amqp.NewSubscriber(amqpURL)
	require.NoError(t, err)
	consume(t, sub, topic, fs)
}

// A broker URL that cannot be opened is a usage error that lists the
// schemes, and no error shows a password.
func TestBrokerURLErrors(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ url, want string }{
		"unknown scheme":      {"ftp://user:hunter2@host:21/x", "want nats://, amqp://"},
		"kafka with a path":   {"kafka://user:hunter2@host:9092/x", "want kafka://host:port"},
		"kafka without port":  {"kafka://host", "has no port"},
		"sqs with a bad host": {"sqs://us-east-1?endpoint=ftp://host", "not an http(s) URL"},
		"sqs unknown param":   {"sqs://us-east-1?region=x", "unknown parameters"},
		"postgres no host":    {"postgres://user:hunter2@/db", "no host"},
	} {
		a, _, _ := testApp(t)
		_, err := a.openBroker(c.url)
		require.Error(t, err, name)
		assert.Equal(t, exitUsage, exitCode(err), name)
		assert.Contains(t, err.Error(), c.want, name)
		assert.NotContains(t, err.Error(), "hunter2", name)
	}
}
