package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/internal/childproc"
	"github.com/surely-dev/surely/propagate"
)

// envMsg names the file holding the message an "attempt" child delivers
// to the handler once, as a broker would.
const envMsg = "SURELY_TRACING_MSG"

type wireMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata"`
	Payload  []byte            `json:"payload"`
}

// runAttemptProcess is a child that delivers the message of envMsg to
// the traced handler once, with the SQLite store, and exits. No broker:
// the only thing the attempts share is the store file.
func runAttemptProcess() error {
	name := os.Getenv(envName)
	rec, err := newFileRecorder(spanFile(os.Getenv(envSpanDir), name), name)
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	db, store, err := openStore(context.Background(), os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	dead := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = dead.Close() }()
	h, err := newHandler(tp, store, dead)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(os.Getenv(envMsg))
	if err != nil {
		return err
	}
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		return err
	}
	msg := message.NewMessage(w.UUID, w.Payload)
	for k, v := range w.Metadata {
		msg.Metadata.Set(k, v)
	}
	_, err = h(msg)
	fmt.Println("returned", err) // the outcome line came first, from the chain
	return nil
}

// Three attempts in three child processes that share nothing but the
// SQLite store: the first is SIGKILLed inside the handler, the second
// fails, the third succeeds. Each attempt's link to the previous one can
// only have come through the store's attempt ledger.
func TestLedgerCarriesTheChainAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "store.db")
	db, _, err := openStore(t.Context(), dbPath)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	// The producer: a span, and propagate to stamp the message.
	rec, err := newFileRecorder(spanFile(dir, "producer"), "producer")
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, send := tp.Tracer("orders-service").Start(context.Background(), "send orders", trace.WithSpanKind(trace.SpanKindProducer))
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"A-1002"}`))
	msg.SetContext(ctx)
	stamp, err := propagate.NewPublisher(gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}))
	require.NoError(t, err)
	require.NoError(t, stamp.Stamp(msg))
	send.End()
	require.NoError(t, tp.Shutdown(context.Background()))
	raw, err := json.Marshal(wireMessage{UUID: msg.UUID, Metadata: msg.Metadata, Payload: msg.Payload})
	require.NoError(t, err)
	msgPath := filepath.Join(dir, "msg.json")
	require.NoError(t, os.WriteFile(msgPath, raw, 0o600))

	env := func(name string) []string {
		return []string{envRole + "=attempt", envName + "=" + name, envDB + "=" + dbPath, envSpanDir + "=" + dir, envMsg + "=" + msgPath}
	}
	first := childproc.Start(t, "attempt-1", env("attempt-1"))
	first.WaitFor(t, timeout, markRunning)
	first.Kill()

	// Deliver again until an attempt runs: while attempt 1's lease is
	// live a delivery ends in_progress, charging nothing.
	outcomes := []string{}
	pids := []int{first.Cmd.Process.Pid} // of the process of each attempt
	for i := 2; len(outcomes) < 2 && i < 20; i++ {
		p := childproc.Start(t, fmt.Sprintf("delivery-%d", i), env(fmt.Sprintf("delivery-%d", i)))
		line := p.WaitFor(t, timeout, markOutcome)
		if o := strings.Fields(strings.TrimPrefix(line, markOutcome))[0]; o != "in_progress" {
			outcomes = append(outcomes, o)
			pids = append(pids, p.Cmd.Process.Pid)
		}
		p.WaitFor(t, timeout, "returned")
	}
	require.Equal(t, []string{"retry", "processed"}, outcomes)

	spans, err := readSpans(dir)
	require.NoError(t, err)
	ch, err := collect(spans, msg.UUID)
	require.NoError(t, err)
	var out strings.Builder
	ch.print(&out)
	t.Log("\n" + out.String())

	require.Len(t, ch.attempts, 3)
	a1, a2, a3 := ch.attempts[0], ch.attempts[1], ch.attempts[2]
	assert.Equal(t, "attempt-1", a1.Process)
	assert.False(t, a1.Ended)
	assert.Len(t, ch.processes, 3, "three processes")
	assert.Equal(t, send.SpanContext().SpanID().String(), ch.producer.SpanID)
	for _, a := range ch.attempts {
		assert.True(t, hasLink(a, ch.producer.SpanID, "creation"))
	}
	assert.True(t, hasLink(a2, a1.SpanID, "previous_attempt"))
	assert.True(t, hasLink(a3, a2.SpanID, "previous_attempt"))
	assert.Equal(t, "unknown", a2.Attrs["surely.previous"])
	assert.Equal(t, "retry", a2.Attrs["surely.outcome"])
	assert.Equal(t, "Error", a2.Status)
	assert.Equal(t, "failed", a3.Attrs["surely.previous"])
	assert.Equal(t, "processed", a3.Attrs["surely.outcome"])
	assert.Equal(t, 2, ch.linksBetween)
	assert.Contains(t, out.String(), "summary: attempts=3 processes=3 links_between_attempts=2 killed=1 final=processed")

	// The store's ledger names the process of each attempt, "host/pid".
	db, store, err := openStore(t.Context(), dbPath)
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	r, err := store.Get(t.Context(), "charge-payments", a3.Attrs["surely.operation_key"])
	require.NoError(t, err)
	require.Len(t, r.History, 3)
	host, err := os.Hostname()
	require.NoError(t, err)
	for i, h := range r.History {
		assert.Equal(t, fmt.Sprintf("%s/%d", host, pids[i]), h.Owner, "attempt %d", i+1)
	}
}
