package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// fixedNow is the clock of every deterministic test.
var fixedNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// testApp returns an app with a fixed clock and sequential IDs, writing to
// buffers.
func testApp(t *testing.T) (*app, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := map[string]string{}
	a := newApp(&stdout, &stderr, func(k string) string { return env[k] })
	a.now = func() time.Time { return fixedNow }
	n := 0
	a.newID = func() string {
		n++
		return fmt.Sprintf("run-%04d", n)
	}
	a.isTerminal = func() bool { return false }
	a.memArchives = map[string]archive.Archive{}
	a.memStores = map[string]idempotency.Store{}
	a.memBrokers = map[string]message.Publisher{}
	return a, &stdout, &stderr
}

// run executes one command line and returns stdout, stderr and the exit status.
func run(t *testing.T, a *app, args ...string) (string, string, int) {
	t.Helper()
	out, errOut := buffer(a.stdout), buffer(a.stderr)
	out.Reset()
	errOut.Reset()
	a.started = false
	code := execute(context.Background(), a, args)
	return out.String(), errOut.String(), code
}

// golden compares got with testdata/name.golden, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/surely -update to create it")
	require.Equal(t, string(want), got, "golden file %s (rewrite with -update)", path)
}

// failure is one dead letter of the fixture.
type failure struct {
	uuid, key, topic, handler string
	reason                    dlq.Reason
	err                       error
	attempts                  int
	age                       time.Duration
	payload                   []byte
	md                        map[string]string
}

type netError struct{ op string }

func (e *netError) Error() string { return e.op + ": connection refused" }

// fixtureFingerprint is the payload fingerprint of every fixture dead
// letter.
var fixtureFingerprint = "sha256:" + strings.Repeat("0f", 8)

// fixtureFailures are four dead letters of two handlers, one with a
// payload that is not UTF-8.
func fixtureFailures() []failure {
	return []failure{
		{
			uuid: "11111111-1111-4111-8111-111111111111", key: "order-1", topic: "orders", handler: "charge-payments",
			reason: dlq.ReasonExhausted, err: fmt.Errorf("charge order-1: %w", &netError{"dial tcp 10.0.0.7:443"}),
			attempts: 3, age: 3 * time.Hour, payload: []byte(`{"order":1,"amount":"10.00 EUR"}`),
			md: map[string]string{"idempotency_key": "order-1", "content-type": "application/json"},
		},
		{
			uuid: "22222222-2222-4222-8222-222222222222", key: "order-2", topic: "orders", handler: "charge-payments",
			reason: dlq.ReasonPermanent, err: errors.New("card declined"),
			attempts: 1, age: 2 * time.Hour, payload: []byte(`{"order":2,"amount":"99.00 EUR"}`),
			md: map[string]string{"idempotency_key": "order-2"},
		},
		{
			uuid: "33333333-3333-4333-8333-333333333333", key: "order-3", topic: "orders", handler: "charge-payments",
			reason: dlq.ReasonExhausted, err: fmt.Errorf("charge order-3: %w", &netError{"dial tcp 10.0.0.7:443"}),
			attempts: 3, age: 90 * time.Minute, payload: []byte(`{"order":3,"amount":"5.00 EUR"}`),
			md: map[string]string{"idempotency_key": "order-3"},
		},
		{
			uuid: "44444444-4444-4444-8444-444444444444", key: "parcel-9", topic: "shipments", handler: "book-courier",
			reason: dlq.ReasonPanic, err: errors.New("panic: runtime error: index out of range [3] with length 3"),
			attempts: 5, age: 10 * time.Minute, payload: []byte{0x00, 0xff, 0xfe, 'p', 'b'},
			md: map[string]string{"idempotency_key": "parcel-9", "content-type": "application/x-protobuf"},
		},
	}
}

// envelope builds the dead letter of f as the dead-letter step would, with
// a per-attempt history whose trace IDs follow the attempt number, on two
// processes in turn.
func (f failure) envelope(now time.Time) *message.Message {
	msg := message.NewMessage(f.uuid, f.payload)
	for k, v := range f.md {
		msg.Metadata.Set(k, v)
	}
	at := now.Add(-f.age)
	var hist []idempotency.AttemptRecord
	for i := 1; i <= f.attempts; i++ {
		started := at.Add(time.Duration(i-f.attempts-1) * time.Minute)
		hist = append(hist, idempotency.AttemptRecord{
			Attempt: i, Started: started, Ended: started.Add(150 * time.Millisecond),
			Result: idempotency.ResultFailed, Error: f.err.Error(), Reason: "error",
			TraceID: fmt.Sprintf("%s%02d", strings.Repeat("a", 30), i), SpanID: fmt.Sprintf("%s%02d", strings.Repeat("b", 14), i),
			Owner: fmt.Sprintf("worker-%d/%d", 2-i%2, 4102-i%2),
		})
	}
	return dlq.Wrap(msg, dlq.Failure{
		Reason: f.reason, Err: f.err, Attempts: f.attempts, History: hist,
		OperationKey: f.key, Fingerprint: fixtureFingerprint, Topic: f.topic, Handler: f.handler,
		Namespace: f.handler, Retention: 24 * time.Hour,
		TraceID: fmt.Sprintf("%s%02d", strings.Repeat("a", 30), f.attempts), SpanID: strings.Repeat("c", 16), At: at,
	}, nil, "worker-1", "payments")
}

// fill publishes the fixture into ar.
func fill(t *testing.T, ar archive.Archive) []failure {
	t.Helper()
	fs := fixtureFailures()
	for _, f := range fs {
		require.NoError(t, ar.Publish("dead", f.envelope(fixedNow)))
	}
	return fs
}

// memFixture registers a filled in-memory archive as mem:fixture and
// returns it.
func memFixture(t *testing.T, a *app) archive.Archive {
	t.Helper()
	ar, err := memarchive.New(dlq.WithClock(func() time.Time { return fixedNow.Add(-time.Minute) }))
	require.NoError(t, err)
	fill(t, ar)
	a.memArchives["fixture"] = ar
	return ar
}

func dlqID(original string) string { return envelope.DeadLetterUUID(original) }

var (
	dlqFilterAll = archive.Filter{}
	dlqPageAll   = archive.Page{Limit: 1000}
)

// buffer returns the test buffer behind an app's output.
func buffer(w io.Writer) *bytes.Buffer {
	if sw, ok := w.(*stickyWriter); ok {
		w = sw.w
	}
	return w.(*bytes.Buffer)
}
