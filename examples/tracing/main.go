// Command tracing follows one message through a redelivery chain that
// crosses processes, with no server to install: an embedded NATS JetStream
// server is the queue and a SQLite file is surely's store, shared by the
// consumer processes.
//
// It publishes one order through propagate (which stamps its operation key
// and the producer span's traceparent), then runs the consumer as child
// processes of this same binary:
//
//  1. consumer-1 receives the order; its handler hangs in attempt 1 and the
//     process is killed with SIGKILL, holding the lease;
//  2. consumer-2 gets the redelivery once the lease expired; attempt 2
//     fails (the payment gateway times out) and is nacked;
//  3. the broker redelivers; attempt 3 succeeds.
//
// Every process writes its spans to a file of its own (a line when a span
// starts, so the killed attempt is not lost, and one when it ends); the
// parent merges them and prints the chain as a timeline: attempt, consumer
// process, outcome, duration and links, then a summary line:
//
//	summary: attempts=3 processes=2 links_between_attempts=2 killed=1 final=processed
//
// Attempt 2 is linked to attempt 1 although they ran in different
// processes and attempt 1 never ended: its span context travelled through
// the store's attempt ledger, where the claim of attempt 1 recorded it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/internal/childproc"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/propagate"
)

const (
	stream    = "ORDERS"
	topic     = "orders"
	deadTopic = "orders.dead"
	group     = "billing"
)

func main() {
	var err error
	if os.Getenv(envRole) == "consumer" {
		err = runConsumerProcess()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err = run(ctx, os.Stdout)
		cancel()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
}

// run publishes the order, runs the two consumers, and prints the chain.
func run(ctx context.Context, out io.Writer) (*chain, error) {
	dir, err := os.MkdirTemp("", "surely-tracing-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	srv, err := startNATS(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	dbPath := filepath.Join(dir, "store.db")
	db, _, err := openStore(ctx, dbPath) // creates the tables before the consumers start
	if err != nil {
		return nil, err
	}
	_ = db.Close()

	uuid, err := produce(ctx, srv.ClientURL(), dir)
	if err != nil {
		return nil, err
	}
	say(out, "published order %s\n", uuid)

	c1, err := startConsumer(ctx, dir, "consumer-1", srv.ClientURL(), dbPath)
	if err != nil {
		return nil, err
	}
	if _, err := c1.waitFor(markRunning); err != nil {
		return nil, err
	}
	c1.kill()
	say(out, "consumer-1 (pid %d) SIGKILLed inside attempt 1, holding the lease\n", c1.cmd.Process.Pid)

	c2, err := startConsumer(ctx, dir, "consumer-2", srv.ClientURL(), dbPath)
	if err != nil {
		return nil, err
	}
	if _, err := c2.waitFor(markOutcome + "processed"); err != nil {
		return nil, err
	}
	if err := c2.stop(); err != nil {
		return nil, err
	}
	say(out, "consumer-2 (pid %d) processed it and exited\n\n", c2.cmd.Process.Pid)

	spans, err := readSpans(dir)
	if err != nil {
		return nil, err
	}
	ch, err := collect(spans, uuid)
	if err != nil {
		return nil, err
	}
	ch.print(out)
	if len(ch.attempts) != 3 || ch.linksBetween != 2 {
		return ch, fmt.Errorf("expected 3 attempts and 2 links between them, got %d and %d", len(ch.attempts), ch.linksBetween)
	}
	return ch, nil
}

func startNATS(ctx context.Context, storeDir string) (*server.Server, error) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded NATS did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	defer nc.Close()
	if err := surelynats.EnsureStream(ctx, nc, jetstream.StreamConfig{Name: stream, Subjects: []string{topic, deadTopic}}); err != nil {
		srv.Shutdown()
		return nil, err
	}
	return srv, nil
}

// produce publishes one order inside a producer span, through propagate.
func produce(ctx context.Context, natsURL, dir string) (string, error) {
	rec, err := newFileRecorder(spanFile(dir, "producer"), "producer")
	if err != nil {
		return "", err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	natsPub, err := surelynats.NewPublisher(natsURL)
	if err != nil {
		return "", err
	}
	defer func() { _ = natsPub.Close() }()
	pub, err := propagate.NewPublisher(natsPub)
	if err != nil {
		return "", err
	}
	sctx, span := tp.Tracer("orders-service").Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemKey.String("nats"), semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationTypeSend))
	defer span.End()
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"A-1001","amount_cents":4200}`))
	msg.SetContext(sctx)
	if err := pub.Publish(topic, msg); err != nil {
		span.RecordError(err)
		return "", err
	}
	return msg.UUID, nil
}

// consumer is a child process running runConsumerProcess.
type consumer struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *childproc.Lines
	errBuf *childproc.Buffer
	exited chan struct{}
}

func startConsumer(ctx context.Context, dir, name, natsURL, dbPath string) (*consumer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &consumer{name: name, out: childproc.NewLines(256), errBuf: &childproc.Buffer{}, exited: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, exe)
	c.cmd.Env = append(os.Environ(), envRole+"=consumer", envName+"="+name, envNATS+"="+natsURL,
		envDB+"="+dbPath, envSpanDir+"="+dir)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.errBuf
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *consumer) waitFor(prefix string) (string, error) {
	line, err := childproc.WaitLine(c.out, c.exited, time.Minute, func(l string) bool { return strings.HasPrefix(l, prefix) })
	if err != nil {
		c.kill()
		return "", fmt.Errorf("%s: waiting for %q: %w\nstdout:\n%s\nstderr:\n%s", c.name, prefix, err, c.out.All(), c.errBuf.String())
	}
	return line, nil
}

// kill SIGKILLs the child: no deferred code runs, its lease stays held.
func (c *consumer) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
	_ = c.stdin.Close()
}

// stop closes the child's stdin, which makes it shut down cleanly.
func (c *consumer) stop() error {
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.kill()
		return fmt.Errorf("%s did not exit after its stdin closed", c.name)
	}
	if !c.cmd.ProcessState.Success() {
		return fmt.Errorf("%s: %v\nstderr:\n%s", c.name, c.cmd.ProcessState, c.errBuf.String())
	}
	return nil
}

// chain is the redelivery chain of one message, merged from every process.
type chain struct {
	uuid         string
	producer     *span
	deliveries   []*span        // every process span of the message, in start order
	attempts     []*span        // those that ran an attempt, by attempt number
	attemptOf    map[string]int // span ID → attempt number
	linksBetween int            // previous_attempt links between two attempt spans
	processes    map[string]bool
	killed       int
	final        string
}

func collect(spans []*span, uuid string) (*chain, error) {
	ch := &chain{uuid: uuid, attemptOf: map[string]int{}, processes: map[string]bool{}}
	byID := map[string]*span{}
	for _, s := range spans {
		byID[s.SpanID] = s
		if s.Process == "producer" && s.Kind == "producer" {
			ch.producer = s
		}
		if s.Attrs["messaging.message.id"] == uuid && strings.HasPrefix(s.Name, "process") {
			ch.deliveries = append(ch.deliveries, s)
		}
	}
	if ch.producer == nil || len(ch.deliveries) == 0 {
		return nil, errNoSpans
	}
	// A span's attempt is its surely.attempt; a span whose process died
	// before it ended has none yet: the next attempt's link names it.
	for _, s := range ch.deliveries {
		if n, err := strconv.Atoi(s.Attrs[string(middleware.AttrAttempt)]); err == nil {
			ch.attemptOf[s.SpanID] = n
		}
		for _, l := range s.Links {
			if l.Attrs[string(middleware.AttrLink)] != middleware.LinkPreviousAttempt {
				continue
			}
			if n, err := strconv.Atoi(l.Attrs[string(middleware.AttrAttempt)]); err == nil {
				if _, known := ch.attemptOf[l.SpanID]; !known && byID[l.SpanID] != nil {
					ch.attemptOf[l.SpanID] = n
				}
			}
		}
	}
	for _, s := range ch.deliveries {
		if _, ok := ch.attemptOf[s.SpanID]; ok {
			ch.attempts = append(ch.attempts, s)
			ch.processes[s.Process] = true
			if !s.Ended {
				ch.killed++
			}
		}
	}
	sort.Slice(ch.attempts, func(i, j int) bool { return ch.attemptOf[ch.attempts[i].SpanID] < ch.attemptOf[ch.attempts[j].SpanID] })
	for _, s := range ch.attempts {
		for _, l := range s.Links {
			if _, ok := ch.attemptOf[l.SpanID]; ok && l.Attrs[string(middleware.AttrLink)] == middleware.LinkPreviousAttempt {
				ch.linksBetween++
			}
		}
	}
	if n := len(ch.attempts); n > 0 {
		ch.final = ch.attempts[n-1].Attrs[string(middleware.AttrOutcome)]
	}
	return ch, nil
}

// say writes to the program's output; a failing stdout is not worth an error.
func say(out io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(out, format, args...) }

func (ch *chain) print(out io.Writer) {
	t0 := ch.producer.Start
	byID := map[string]*span{ch.producer.SpanID: ch.producer}
	for _, s := range ch.deliveries {
		byID[s.SpanID] = s
	}
	key := ""
	for _, s := range ch.deliveries {
		if k := s.Attrs[string(middleware.AttrOperationKey)]; k != "" {
			key = k
		}
	}
	say(out, "redelivery chain of message %s (operation key %s), topic %s, consumer group %s\n\n", ch.uuid, key, topic, group)
	say(out, "%-9s %-11s %-10s %-16s %-14s %s\n", "at", "process", "attempt", "span", "outcome", "duration")
	say(out, "%-9s %-11s %-10s %-16s %-14s %s\n", "+0s", "producer", "-", shortID(ch.producer.SpanID)+" send", "published", durationOf(ch.producer))
	for _, s := range ch.deliveries {
		attempt := "-"
		if n, ok := ch.attemptOf[s.SpanID]; ok {
			attempt = strconv.Itoa(n)
		}
		outcome := s.Attrs[string(middleware.AttrOutcome)]
		if !s.Ended {
			outcome = "(killed)"
		}
		say(out, "%-9s %-11s %-10s %-16s %-14s %s\n", "+"+s.Start.Sub(t0).Round(time.Millisecond).String(), s.Process,
			attempt, shortID(s.SpanID)+" process", outcome, durationOf(s))
		var notes []string
		if dc := s.Attrs[string(middleware.AttrDeliveryCount)]; dc != "" {
			notes = append(notes, "broker delivery "+dc)
		}
		if p := s.Attrs[string(middleware.AttrPrevious)]; p != "" {
			notes = append(notes, "previous attempt "+p)
		}
		if !s.Ended {
			notes = append(notes, fmt.Sprintf("process pid %d died before the span ended", s.PID))
		}
		if s.Status == "Error" {
			notes = append(notes, fmt.Sprintf("error %q", s.ErrorMsg))
		}
		if outcome == "in_progress" {
			notes = append(notes, "another owner's lease was live: nacked with a delay, no attempt charged")
		}
		if len(notes) > 0 {
			say(out, "%-21s %s\n", "", strings.Join(notes, "; "))
		}
		for _, l := range s.Links {
			say(out, "%-21s ↳ %s\n", "", describeLink(l, byID, ch.attemptOf))
		}
	}
	say(out, "\nsummary: attempts=%d processes=%d links_between_attempts=%d killed=%d final=%s\n",
		len(ch.attempts), len(ch.processes), ch.linksBetween, ch.killed, ch.final)
}
