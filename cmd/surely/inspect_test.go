package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/retry"
)

// traceCtx returns a context carrying a sampled span with the given IDs.
func traceCtx(t *testing.T, traceHex, spanHex string) context.Context {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceHex)
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex(spanHex)
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

// The chain of the inspect tests: attempt 1 on consumer A and attempt 2 on
// consumer B fail, attempt 3 on consumer A succeeds. owner is the process
// of the consumer where a test names it (TestInspectGolden); driven by
// handler.New, both consumers are this process.
var chain = []struct {
	consumer, trace, span, err, owner string
}{
	{"A", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "consumer A: inventory service timeout", "host-a/101"},
	{"B", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "consumer B: inventory service 503", "host-b/202"},
	{"A", "5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13", "", "host-a/101"},
}

// driveTwoConsumers runs the chain through two handler.New consumers that
// share store, calling each consumer's chain as the router would.
func driveTwoConsumers(t *testing.T, store idempotency.Store, ns, key string) {
	t.Helper()
	dead, err := memarchive.New()
	require.NoError(t, err)
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(1), retry.WithMaxAttempts(5), retry.WithBackoff(0, 0))
	require.NoError(t, err)
	var step int
	newConsumer := func(name string) message.HandlerFunc {
		h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
			if e := chain[step].err; e != "" {
				return nil, errors.New(e)
			}
			out := message.NewMessage("77777777-7777-4777-8777-777777777777", []byte(`{"reserved":true}`))
			out.Metadata.Set("idempotency_key", "reserve-"+idempotency.KeyFrom(msg.Context()))
			return []*message.Message{out}, nil
		},
			handler.WithStore(store, ns), handler.WithDeadLetter(dead, "dead"),
			handler.WithPolicy(policy), handler.WithBreaker(nil), handler.WithConsumerGroup("group-"+name))
		require.NoError(t, err)
		return h
	}
	consumers := map[string]message.HandlerFunc{"A": newConsumer("A"), "B": newConsumer("B")}
	msgUUID := uuid.NewString()
	for i, c := range chain {
		step = i
		msg := message.NewMessage(msgUUID, []byte(`{"sku":"tea","qty":2}`))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
		msg.SetContext(traceCtx(t, c.trace, c.span))
		_, err := consumers[c.consumer](msg)
		if c.err != "" {
			require.Error(t, err, "attempt %d", i+1)
		} else {
			require.NoError(t, err, "attempt %d", i+1)
		}
	}
	entries, err := dead.List(context.Background(), dlqFilterAll, dlqPageAll)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing is dead-lettered")
}

// assertChain checks the inspect --json output of the chain.
func assertChain(t *testing.T, out string, ns, key string) {
	t.Helper()
	var rec recordJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
	assert.Equal(t, ns, rec.Namespace)
	assert.Equal(t, key, rec.Key)
	assert.Equal(t, "done", rec.State)
	assert.Equal(t, 3, rec.Attempts)
	require.Len(t, rec.Ledger, 3, out)
	wantResult := []idempotency.AttemptResult{"failed", "failed", "done"}
	for i, c := range chain {
		l := rec.Ledger[i]
		assert.Equal(t, i+1, l.Attempt)
		assert.Equal(t, wantResult[i], l.Result, "attempt %d", i+1)
		assert.Equal(t, c.err, l.Error, "attempt %d", i+1)
		assert.Equal(t, c.trace, l.TraceID, "attempt %d", i+1)
		assert.Equal(t, c.span, l.SpanID, "attempt %d", i+1)
		assert.Equal(t, idem.ProcessOwner(), l.Owner, "attempt %d: the process that ran it", i+1)
		assert.False(t, l.Started.IsZero())
		assert.False(t, l.Ended.Before(l.Started))
	}
	require.Len(t, rec.Outcome, 1)
	assert.Equal(t, "77777777-7777-4777-8777-777777777777", rec.Outcome[0].UUID)
	assert.Equal(t, `{"reserved":true}`, rec.Outcome[0].Payload.Data)
	require.NotNil(t, rec.ExpiresAt, "retention expiry")
	assert.NotEmpty(t, rec.LeaseToken)
	assert.NotEmpty(t, rec.Fingerprint)
}

func TestInspectSQLiteTwoConsumers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable("cli_inbox"))
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	driveTwoConsumers(t, store, "reserve-stock", "order-7")

	a, _, _ := testApp(t)
	a.now = time.Now
	out, stderr, code := run(t, a, "inspect", "order-7", "--namespace", "reserve-stock",
		"--store", "sqlite:"+path, "--store-table", "cli_inbox", "--json")
	require.Equal(t, 0, code, stderr)
	assertChain(t, out, "reserve-stock", "order-7")

	// The text form shows the same chain.
	out, stderr, code = run(t, a, "inspect", "order-7", "--namespace", "reserve-stock",
		"--store", path+"?table=cli_inbox")
	require.Equal(t, 0, code, stderr)
	for _, c := range chain {
		assert.Contains(t, out, c.trace)
	}
	assert.Regexp(t, `(?m)^\s+2\s.*\sfailed\s+error\s+`+regexp.QuoteMeta(idem.ProcessOwner())+`\s+`+chain[1].trace, out, "the process column")
	assert.Contains(t, out, "state:")
	assert.Contains(t, out, "consumer B: inventory service 503")
	assert.Regexp(t, `(?m)^\s+3\s.*\sdone\s`, out)

	// Unknown key: exit 3.
	_, stderr, code = run(t, a, "inspect", "order-8", "--namespace", "reserve-stock",
		"--store", "sqlite:"+path, "--store-table", "cli_inbox")
	assert.Equal(t, exitNotFound, code, stderr)
	assert.Contains(t, stderr, "record not found")

	// A database file that does not exist is not created.
	_, stderr, code = run(t, a, "inspect", "order-7", "--namespace", "reserve-stock",
		"--store", "sqlite:"+filepath.Join(t.TempDir(), "missing.db"))
	assert.Equal(t, exitError, code, stderr)
	assert.Contains(t, stderr, "no such file")
}

func TestInspectRedisTwoConsumers(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t)
	url := testenv.URL(t, "SURELY_REDIS_URL")
	prefix := "surely-cli-test-" + uuid.NewString()[:8] + ":"
	ctx := context.Background()
	t.Cleanup(func() {
		keys, _ := client.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			client.Del(ctx, keys...)
		}
	})
	store, err := redisstore.New(ctx, client, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	driveTwoConsumers(t, store, "reserve-stock", "order-7")

	a, _, _ := testApp(t)
	a.now = time.Now
	out, stderr, code := run(t, a, "inspect", "order-7", "--namespace", "reserve-stock",
		"--store", url, "--store-prefix", prefix, "--json")
	require.Equal(t, 0, code, stderr)
	assertChain(t, out, "reserve-stock", "order-7")

	// The default prefix does not see the record.
	_, stderr, code = run(t, a, "inspect", "order-7", "--namespace", "reserve-stock", "--store", url)
	assert.Equal(t, exitNotFound, code, stderr)
}

// TestInspectGolden drives a memstore on a fixed clock: fail, fail, in
// progress (a live lease), so the lease fields show too.
func TestInspectGolden(t *testing.T) {
	t.Parallel()
	clock := fixedNow.Add(-10 * time.Minute)
	store, err := memstore.New(idempotency.WithClock(func() time.Time { return clock }))
	require.NoError(t, err)
	ctx := context.Background()
	claim := func(i int) idempotency.Lease {
		res, err := store.Claim(ctx, idempotency.ClaimRequest{
			Namespace: "reserve-stock", Key: "order-7", Fingerprint: "sha256:abcd", Lease: time.Minute,
			MaxAttempts: 5, TraceID: chain[i].trace, SpanID: chain[i].span, Owner: chain[i].owner,
		})
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		return res.Lease
	}
	for i := range 2 {
		l := claim(i)
		clock = clock.Add(2 * time.Second)
		require.NoError(t, store.Release(ctx, l, idempotency.Failure{Error: chain[i].err, ErrorType: "*errors.errorString", Reason: "error"}))
		clock = clock.Add(time.Minute)
	}
	claim(2)

	a, _, _ := testApp(t)
	a.memStores["golden"] = store
	out, stderr, code := run(t, a, "inspect", "order-7", "--namespace", "reserve-stock", "--store", "mem:golden", "--json")
	require.Equal(t, 0, code, stderr)
	out = maskToken(t, out)
	golden(t, "inspect_in_progress_json", out)
	out, stderr, code = run(t, a, "inspect", "order-7", "--namespace", "reserve-stock", "--store", "mem:golden")
	require.Equal(t, 0, code, stderr)
	golden(t, "inspect_in_progress_text", maskToken(t, out))

	// Then it completes with one produced message.
	l, err := store.Get(ctx, "reserve-stock", "order-7")
	require.NoError(t, err)
	clock = clock.Add(3 * time.Second)
	require.NoError(t, store.Complete(ctx, idempotency.Lease{Namespace: "reserve-stock", Key: "order-7", Token: l.Token, Attempt: 3},
		idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "77777777-7777-4777-8777-777777777777",
			Metadata: map[string]string{"idempotency_key": "reserve-order-7"}, Payload: []byte(`{"reserved":true}`)}}}))
	out, stderr, code = run(t, a, "inspect", "order-7", "--namespace", "reserve-stock", "--store", "mem:golden", "--json")
	require.Equal(t, 0, code, stderr)
	golden(t, "inspect_done_json", maskToken(t, out))
	out, stderr, code = run(t, a, "inspect", "order-7", "--namespace", "reserve-stock", "--store", "mem:golden")
	require.Equal(t, 0, code, stderr)
	golden(t, "inspect_done_text", maskToken(t, out))
}

// maskToken replaces the random lease token with a fixed one.
func maskToken(t *testing.T, s string) string {
	t.Helper()
	var rec struct {
		Token string `json:"lease_token"`
	}
	if json.Unmarshal([]byte(s), &rec) == nil && rec.Token != "" {
		return strings.ReplaceAll(s, rec.Token, "TOKEN")
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "lease token:"); ok {
			return strings.ReplaceAll(s, strings.TrimSpace(v), "TOKEN")
		}
	}
	t.Fatalf("no lease token in %s", s)
	return ""
}

var _ = fmt.Sprint
