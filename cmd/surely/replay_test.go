package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/testamqp"
	"github.com/surely-dev/surely/internal/testbroker"
	"github.com/surely-dev/surely/internal/testenv"
)

// recorder is a broker that keeps what it was given. onPublish, when set,
// runs after each publish (to cancel a context, or to dead-letter the
// message again as a failing consumer would).
type recorder struct {
	mu        sync.Mutex
	got       []*message.Message
	topics    []string
	onPublish func(n int, topic string, msg *message.Message)
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		r.mu.Lock()
		r.got = append(r.got, m)
		r.topics = append(r.topics, topic)
		n := len(r.got)
		r.mu.Unlock()
		if r.onPublish != nil {
			r.onPublish(n, topic, m)
		}
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) uuids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.got {
		out = append(out, m.UUID)
	}
	return out
}

// sqliteArchive returns a migrated SQLite archive in a temp file and its URL.
func sqliteArchive(t *testing.T) (*sqlarchive.Archive, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dlq.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ar, err := sqlarchive.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.NoError(t, ar.Migrate(context.Background()))
	return ar, "sqlite:" + path
}

// replayApp is a test app whose clock runs from fixedNow (the rate limiter
// needs a moving clock).
func replayApp(t *testing.T) *app {
	t.Helper()
	a, _, _ := testApp(t)
	start := time.Now()
	a.now = func() time.Time { return fixedNow.Add(time.Since(start)) }
	return a
}

// snapshot is the archive's state as the commands see it.
func snapshot(t *testing.T, ar archive.Archive) []archive.Entry {
	t.Helper()
	es, err := ar.List(context.Background(), archive.Filter{}, archive.Page{Limit: 1000})
	require.NoError(t, err)
	for i := range es {
		es[i].Message = nil // compared by the fields below
	}
	return es
}

func originalUUIDs(fs []failure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.uuid)
	}
	return out
}

func TestReplayDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	fill(t, ar)
	before := snapshot(t, ar)
	a := replayApp(t)
	rec := &recorder{}
	a.memBrokers["mem://rec"] = rec

	out, stderr, code := run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--dry-run", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "dry run run-0001: nothing is published, marked or saved")
	assert.Equal(t, 4, strings.Count(out, "would replay      "), out)
	assert.Contains(t, out, "dry run: would replay 4, would refuse 0")
	// Without a broker too.
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", url, "--dry-run", "--topic", "orders", "--json")
	require.Equal(t, 0, code, stderr)
	var res replayJSON
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.True(t, res.DryRun)
	assert.Equal(t, 3, res.WouldReplay)
	require.Len(t, res.Decisions, 3)
	assert.Equal(t, "would_replay", res.Decisions[0].Action)
	assert.Equal(t, "orders", res.Decisions[0].Topic)

	assert.Empty(t, rec.uuids(), "nothing published")
	assert.Equal(t, before, snapshot(t, ar), "no entry changed")
	for _, id := range []string{"run-0001", "run-0002"} {
		_, err := ar.LoadReplay(context.Background(), id)
		require.ErrorIs(t, err, archive.ErrNotFound, "no run saved")
	}
}

func TestReplayRetentionGuard(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	fill(t, ar)
	old := fixtureFailures()[1]
	old.uuid, old.key, old.age = "55555555-5555-4555-8555-555555555555", "order-5", 30*time.Hour
	require.NoError(t, ar.Publish("dead", old.envelope(fixedNow)))
	a := replayApp(t)
	rec := &recorder{}
	a.memBrokers["mem://rec"] = rec

	out, stderr, code := run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--dry-run", "--key", "order-5")
	assert.Equal(t, exitRefused, code, stderr)
	assert.Contains(t, out, "would refuse")
	assert.Contains(t, out, "longer than the dedup retention 24h0m0s")

	out, stderr, code = run(t, a, "dlq", "replay", "--yes", "--archive", url, "--broker", "mem://rec", "--rate", "0")
	assert.Equal(t, exitRefused, code, stderr)
	assert.Contains(t, out, "replayed 4, refused 1")
	assert.Contains(t, stderr, "1 entry refused (retention guard)")
	assert.ElementsMatch(t, originalUUIDs(fixtureFailures()), rec.uuids())

	out, stderr, code = run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--key", "order-5", "--force")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 1, refused 0")
	assert.Contains(t, rec.uuids(), old.uuid)
}

func TestReplayInterruptAndResume(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	fill(t, ar)
	a := replayApp(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{onPublish: func(n int, _ string, _ *message.Message) {
		if n == 2 {
			cancel() // Ctrl-C after the second message
		}
	}}
	a.memBrokers["mem://rec"] = rec
	stdout, stderr := buffer(a.stdout), buffer(a.stderr)
	a.started = false
	code := execute(ctx, a, []string{"dlq", "replay", "--yes", "--archive", url, "--broker", "mem://rec", "--rate", "0"})
	assert.Equal(t, exitInterrupted, code, stderr.String())
	assert.Contains(t, stdout.String(), "replay run run-0001\n")
	assert.Contains(t, stdout.String(), "resume with: surely dlq replay --resume run-0001")
	assert.Len(t, rec.uuids(), 2)
	run0, err := ar.LoadReplay(context.Background(), "run-0001")
	require.NoError(t, err)
	assert.Equal(t, archive.RunInterrupted, run0.State)
	assert.Equal(t, int64(2), run0.After)

	// Filters cannot be changed on resume.
	_, stderr2, code := run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--resume", "run-0001", "--topic", "x")
	assert.Equal(t, exitUsage, code, stderr2)

	out, errOut, code := run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--resume", "run-0001", "--rate", "0")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "resuming replay run run-0001")
	assert.Contains(t, out, "replayed 2, refused 0, re-failed 0; state done")
	assert.Equal(t, originalUUIDs(fixtureFailures()), rec.uuids(), "every entry once, in order")
	for _, e := range snapshot(t, ar) {
		assert.Equal(t, []string{"run-0001"}, e.ReplayedBy, e.OperationKey)
	}

	// An unknown run: not found.
	_, errOut, code = run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--resume", "nope")
	assert.Equal(t, exitNotFound, code, errOut)
}

func TestReplayMaxThenResume(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	fill(t, ar)
	a := replayApp(t)
	rec := &recorder{}
	a.memBrokers["mem://rec"] = rec
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", url, "--broker", "mem://rec", "--max", "3", "--rate", "1000/s", "--concurrency", "2")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 3")
	// A --max stop is a normal end: state paused, exit status 0.
	assert.Contains(t, out, "; state paused, cursor 3")
	assert.Contains(t, out, "paused after --max 3 with entries left\nresume with: surely dlq replay --resume run-0001")
	run0, err := ar.LoadReplay(context.Background(), "run-0001")
	require.NoError(t, err)
	assert.Equal(t, archive.RunPaused, run0.State)
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", url, "--broker", "mem://rec", "--resume", "run-0001")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 1")
	got := rec.uuids()
	slices.Sort(got)
	want := originalUUIDs(fixtureFailures())
	slices.Sort(want)
	assert.Equal(t, want, got)
}

func TestReplayAbortsOnRefailures(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	for i := range 30 {
		f := fixtureFailures()[1]
		f.uuid, f.key = fmt.Sprintf("66666666-6666-4666-8666-%012d", i), fmt.Sprintf("order-%d", 100+i)
		require.NoError(t, ar.Publish("dead", f.envelope(fixedNow)))
	}
	a := replayApp(t)
	// The consumer fails every replayed message again: the dead-letter
	// step archives its envelope, a new entry carrying the run's ID.
	rec := &recorder{}
	rec.onPublish = func(_ int, topic string, m *message.Message) {
		env := dlq.Wrap(m, dlq.Failure{
			Reason: dlq.ReasonExhausted, Err: errors.New("charge: still failing"), Attempts: 3,
			OperationKey: m.Metadata.Get(idempotency.DefaultMetadataKey), Topic: topic,
			Handler: "charge-payments", Retention: 24 * time.Hour, At: fixedNow,
		}, nil, "worker-1", "payments")
		_ = ar.Publish("dead", env)
	}
	a.memBrokers["mem://rec"] = rec
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", url, "--broker", "mem://rec", "--abort-after", "3", "--rate", "0")
	assert.Equal(t, exitRefused, code, stderr)
	assert.Contains(t, stderr, "aborted")
	assert.Contains(t, out, "resume with: surely dlq replay --resume run-0001")
	run0, err := ar.LoadReplay(context.Background(), "run-0001")
	require.NoError(t, err)
	assert.Equal(t, archive.RunAborted, run0.State)
	assert.Less(t, len(rec.uuids()), 30, "stopped early")

	// The re-failures are listed by the run's ID.
	out, stderr, code = run(t, a, "dlq", "ls", "--archive", url, "--replay-id", "run-0001", "--json")
	require.Equal(t, 0, code, stderr)
	var page lsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	assert.Len(t, page.Entries, len(rec.uuids()))
}

func TestReplayUsage(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	fill(t, ar)
	for _, args := range [][]string{
		{"--rate", "fast"}, {"--concurrency", "0"}, {"--abort-after", "0"}, {"--max", "-1"},
		{"--broker", "ftp://h"}, {}, // a real replay needs a broker
		{"--resume", "bad\nid"},
	} {
		a := replayApp(t)
		_, stderr, code := run(t, a, append([]string{"dlq", "replay", "--archive", url}, args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
}

// TestReplayNATS republishes through an embedded NATS JetStream server and
// checks that each message comes back as the original: UUID, payload and
// operation key.
func TestReplayNATS(t *testing.T) {
	t.Parallel()
	url := testbroker.EmbeddedNATS(t)
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{"orders", "shipments"} {
		require.NoError(t, nats.EnsureStream(ctx, nc, jetstream.StreamConfig{Name: strings.ToUpper(topic), Subjects: []string{topic}}))
	}
	ar, aurl := sqliteArchive(t)
	fs := fill(t, ar)
	a := replayApp(t)

	// A dry run publishes nothing to the broker either.
	_, stderr, code := run(t, a, "dlq", "replay", "--archive", aurl, "--broker", url, "--dry-run")
	require.Equal(t, 0, code, stderr)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "ORDERS")
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Msgs, "dry run published nothing")

	env := map[string]string{"SURELY_BROKER_URL": url, "SURELY_ARCHIVE_URL": aurl}
	a.env = func(k string) string { return env[k] }
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--rate", "100/s")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 4, refused 0")
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.State.Msgs, "3 messages on orders")

	// Read the streams as stored (what any consumer receives), decoded by
	// the publisher's marshaler.
	got := map[string]*message.Message{}
	for _, name := range []string{"ORDERS", "SHIPMENTS"} {
		stream, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			raw, err := stream.GetMsg(ctx, seq)
			require.NoError(t, err)
			m, err := (&wmnats.NATSMarshaler{}).Unmarshal(&natsgo.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
			require.NoError(t, err)
			got[m.UUID] = m
		}
	}
	require.Len(t, got, 4)
	for _, f := range fs {
		m, ok := got[f.uuid]
		require.True(t, ok, "original UUID %s kept", f.uuid)
		assert.Equal(t, f.key, m.Metadata.Get(idempotency.DefaultMetadataKey), "operation key kept")
		assert.Equal(t, f.payload, []byte(m.Payload))
		assert.Equal(t, "run-0002", m.Metadata.Get(dlq.KeyReplayID))
		assert.Equal(t, envelope.DeadLetterUUID(f.uuid), m.Metadata.Get(dlq.KeyReplayOf))
		assert.Empty(t, m.Metadata.Get(dlq.KeyReason), "no envelope keys")
	}
}

// TestReplayRedisStreams republishes to a stream of the shared Redis
// (a topic of its own, through --target) and reads it back.
func TestReplayRedisStreams(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t)
	url := testenv.URL(t, "SURELY_REDIS_URL")
	stream := "surely-cli-test-" + uuid.NewString()[:8]
	ctx := context.Background()
	t.Cleanup(func() { client.Del(ctx, stream) })
	ar, aurl := sqliteArchive(t)
	fs := fill(t, ar)
	a := replayApp(t)
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", aurl, "--broker", url, "--target", stream, "--rate", "0")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, "replayed 4, refused 0")
	entries, err := client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 4)
	var got []string
	for _, e := range entries {
		m, err := wmredis.DefaultMarshallerUnmarshaller{}.Unmarshal(e.Values)
		require.NoError(t, err)
		got = append(got, m.UUID+" "+m.Metadata.Get(idempotency.DefaultMetadataKey))
	}
	var want []string
	for _, f := range fs {
		want = append(want, f.uuid+" "+f.key)
	}
	assert.Equal(t, want, got)
}

// TestReplayAMQP republishes to a queue of its own on the shared RabbitMQ.
func TestReplayAMQP(t *testing.T) {
	t.Parallel()
	url := testamqp.URL(t)
	queue := "surely-cli-test-" + uuid.NewString()[:8]
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	ar, aurl := sqliteArchive(t)
	fs := fill(t, ar)
	a := replayApp(t)
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", aurl, "--broker", url, "--target", queue, "--rate", "0")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, "replayed 4, refused 0")
	var got []string
	for range fs {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		require.True(t, ok)
		got = append(got, fmt.Sprint(d.Headers[idempotency.DefaultMetadataKey]))
	}
	var want []string
	for _, f := range fs {
		want = append(want, f.key)
	}
	assert.Equal(t, want, got)
}

// On a terminal the run shows a progress bar (on stderr) instead of one
// line per entry.
func TestReplayProgressBarOnTerminal(t *testing.T) {
	t.Parallel()
	ar, url := sqliteArchive(t)
	fill(t, ar)
	a := replayApp(t)
	a.isTerminal = func() bool { return true }
	a.memBrokers["mem://rec"] = &recorder{}
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", url, "--broker", "mem://rec", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, " -> ", "no per-entry lines")
	assert.Contains(t, out, "replayed 4, refused 0")
	assert.Contains(t, stderr, "replay")
	assert.Contains(t, stderr, "/4)", "a bar of 4")
}
