package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/propagate"
	"github.com/surely-dev/surely/retry"
)

const deadTopic = "dead"

type rig struct {
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	store  idempotency.Store
	dead   *faults.Publisher
	logs   *ctxLog
	h      message.HandlerFunc
}

// setup builds handler.New(fn) with an in-memory span recorder, a manual
// metric reader, a memstore and a recording dead-letter publisher.
func setup(t *testing.T, fn message.HandlerFunc, inProcess int, opts ...handler.Option) *rig {
	t.Helper()
	r := &rig{rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), dead: faults.NewPublisher(0), logs: &ctxLog{}}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.rec))
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	var err error
	r.store, err = memstore.New()
	require.NoError(t, err)
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(inProcess), retry.WithMaxAttempts(5),
		retry.WithBackoff(time.Millisecond, 2*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	require.NoError(t, err)
	all := append([]handler.Option{
		handler.WithStore(r.store, "orders"),
		handler.WithDeadLetter(r.dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(time.Second),
		handler.WithTracerProvider(r.tp),
		handler.WithMeterProvider(r.mp),
		handler.WithMessagingSystem("nats"),
		handler.WithConsumerGroup("billing"),
		handler.WithLogger(slog.New(r.logs)),
	}, opts...)
	r.h, err = handler.New(fn, all...)
	require.NoError(t, err)
	return r
}

// produce publishes one message the way a producer does: inside a span,
// through propagate, and returns what the broker delivers (a copy).
func (r *rig) produce(t *testing.T, uuid, payload string, md ...string) (*message.Message, trace.SpanContext) {
	t.Helper()
	ctx, span := r.tp.Tracer("producer").Start(context.Background(), "send orders", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	msg := message.NewMessage(uuid, []byte(payload))
	for i := 0; i+1 < len(md); i += 2 {
		msg.Metadata.Set(md[i], md[i+1])
	}
	msg.SetContext(ctx)
	pub, err := propagate.NewPublisher(faults.NewPublisher(0))
	require.NoError(t, err)
	require.NoError(t, pub.Stamp(msg))
	return redeliver(msg), span.SpanContext()
}

// redeliver is the copy of msg a broker hands to a consumer.
func redeliver(msg *message.Message) *message.Message {
	out := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	return out
}

// spans returns the ended consumer-side spans, in start order.
func (r *rig) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if name == "" || s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// linkTo returns the attributes of s's link to sc, and whether there is one.
func linkTo(s sdktrace.ReadOnlySpan, sc trace.SpanContext) (map[attribute.Key]attribute.Value, bool) {
	for _, l := range s.Links() {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			m := map[attribute.Key]attribute.Value{}
			for _, kv := range l.Attributes {
				m[kv.Key] = kv.Value
			}
			return m, true
		}
	}
	return nil, false
}

func failTimes(n int, err error) message.HandlerFunc {
	var mu sync.Mutex
	calls := 0
	return func(*message.Message) ([]*message.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= n {
			return nil, err
		}
		return nil, nil
	}
}

var errFlaky = errors.New("payment gateway timeout")

func TestTraceInProcessAttemptsAreLinkedSpans(t *testing.T) {
	t.Parallel()
	r := setup(t, failTimes(2, errFlaky), 3)
	msg, creation := r.produce(t, "m-1", `{"order":1}`)

	_, err := r.h(msg)
	require.NoError(t, err)

	spans := r.spans("process")
	require.Len(t, spans, 3, "one span per attempt")
	wantOutcome := []string{"retry", "retry", "processed"}
	for i, s := range spans {
		assert.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		assert.Equal(t, "nats", attr(s, "messaging.system").AsString())
		assert.Equal(t, "process", attr(s, "messaging.operation.type").AsString())
		assert.Equal(t, "billing", attr(s, "messaging.consumer.group.name").AsString())
		assert.Equal(t, "m-1", attr(s, "messaging.message.id").AsString())
		assert.Equal(t, "m-1", attr(s, middleware.AttrOperationKey).AsString(), "the producer's key is the UUID")
		assert.Equal(t, int64(i+1), attr(s, middleware.AttrAttempt).AsInt64())
		assert.Equal(t, wantOutcome[i], attr(s, middleware.AttrOutcome).AsString())
		la, ok := linkTo(s, creation)
		require.True(t, ok, "attempt %d links to the creation context", i+1)
		assert.Equal(t, middleware.LinkCreation, la[middleware.AttrLink].AsString())
		assert.False(t, s.Parent().IsValid(), "an attempt span is a root, linked, not a child")
		if i > 0 {
			la, ok := linkTo(s, spans[i-1].SpanContext())
			require.True(t, ok, "attempt %d links to attempt %d", i+1, i)
			assert.Equal(t, middleware.LinkPreviousAttempt, la[middleware.AttrLink].AsString())
		}
	}
	assert.Equal(t, codes.Error, spans[0].Status().Code, "a handler error is a span error")
	assert.Equal(t, codes.Unset, spans[2].Status().Code)

	// The ledger keeps each claim's span: attempt 1's span context is in the store.
	rec, err := r.store.Get(t.Context(), "orders", "m-1")
	require.NoError(t, err)
	require.Len(t, rec.History, 3)
	for i, a := range rec.History {
		assert.Equal(t, spans[i].SpanContext().SpanID().String(), a.SpanID, "ledger attempt %d", a.Attempt)
	}
}

func TestTraceRedeliveryLinksThroughTheLedger(t *testing.T) {
	t.Parallel()
	fn := failTimes(1, errFlaky)
	first := setup(t, fn, 1)
	msg, creation := first.produce(t, "m-2", `{"order":2}`)
	_, err := first.h(redeliver(msg))
	require.ErrorIs(t, err, errFlaky)

	// Another consumer with its own tracer provider: the previous span can
	// only come from the store.
	second := setup(t, fn, 1)
	second.store = first.store
	second.h, err = handler.New(fn, handler.WithStore(first.store, "orders"), handler.WithDeadLetter(second.dead, deadTopic),
		handler.WithTracerProvider(second.tp), handler.WithBreaker(nil))
	require.NoError(t, err)
	_, err = second.h(redeliver(msg))
	require.NoError(t, err)

	prev := first.spans("process")
	require.Len(t, prev, 1)
	next := second.spans("process")
	require.Len(t, next, 1)
	assert.Equal(t, "retry", attr(prev[0], middleware.AttrOutcome).AsString())
	assert.Equal(t, "processed", attr(next[0], middleware.AttrOutcome).AsString())
	assert.Equal(t, int64(2), attr(next[0], middleware.AttrAttempt).AsInt64())
	assert.Equal(t, "failed", attr(next[0], middleware.AttrPrevious).AsString())
	_, ok := linkTo(next[0], creation)
	assert.True(t, ok, "creation link")
	la, ok := linkTo(next[0], prev[0].SpanContext())
	require.True(t, ok, "the redelivery links to the first consumer's span")
	assert.Equal(t, middleware.LinkPreviousAttempt, la[middleware.AttrLink].AsString())
	assert.Equal(t, int64(1), la[middleware.AttrAttempt].AsInt64())
	assert.Equal(t, "failed", la[middleware.AttrPrevious].AsString())
}

// countGets counts Store.Get calls (the attempt ledger reads).
type countGets struct {
	idempotency.Store
	mu   sync.Mutex
	gets int
}

func (c *countGets) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Store.Get(ctx, namespace, key)
}

func (c *countGets) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

func TestTraceReadsTheLedgerOnlyForASampledRedelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		gets    int
	}{
		{"sampled", sdktrace.AlwaysSample(), 1},
		{"unsampled", sdktrace.NeverSample(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem, err := memstore.New()
			require.NoError(t, err)
			store := &countGets{Store: mem}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler))
			h, err := handler.New(failTimes(1, errFlaky), handler.WithStore(store, "orders"),
				handler.WithDeadLetter(faults.NewPublisher(0), deadTopic), handler.WithTracerProvider(tp),
				handler.WithBreaker(nil), handler.WithPolicy(oneInProcess(t)))
			require.NoError(t, err)
			msg := message.NewMessage("m-gets", []byte(`{"order":9}`))
			_, err = h(redeliver(msg))
			require.ErrorIs(t, err, errFlaky)
			assert.Zero(t, store.n(), "a first attempt reads no ledger")
			_, err = h(redeliver(msg))
			require.NoError(t, err)
			assert.Equal(t, tc.gets, store.n(), "ledger reads on the redelivery")
		})
	}
}

// oneInProcess is a policy of one in-process attempt per delivery.
func oneInProcess(t *testing.T) *retry.Policy {
	t.Helper()
	p, err := retry.NewPolicy(retry.WithInProcessAttempts(1), retry.WithMaxAttempts(5),
		retry.WithBackoff(time.Millisecond, 2*time.Millisecond))
	require.NoError(t, err)
	return p
}

func TestTraceDeadLetterSpanAndReplayLink(t *testing.T) {
	t.Parallel()
	r := setup(t, func(*message.Message) ([]*message.Message, error) {
		return nil, retry.Permanent(errors.New("card declined"))
	}, 3)
	msg, _ := r.produce(t, "m-3", `{"order":3}`)
	_, err := r.h(msg)
	require.NoError(t, err, "dead-lettered, then acked")

	attempts := r.spans("process")
	require.Len(t, attempts, 1)
	a := attempts[0]
	assert.Equal(t, "dead_lettered", attr(a, middleware.AttrOutcome).AsString())
	assert.Equal(t, "permanent", attr(a, middleware.AttrDeadLetterReason).AsString())
	assert.Equal(t, codes.Error, a.Status().Code, "the handler's error is recorded")

	dls := r.spans("dead_letter " + deadTopic)
	require.Len(t, dls, 1)
	dl := dls[0]
	assert.Equal(t, a.SpanContext().SpanID(), dl.Parent().SpanID(), "the dead-letter span is a child of the attempt")
	assert.Equal(t, trace.SpanKindProducer, dl.SpanKind())
	assert.Equal(t, codes.Unset, dl.Status().Code)

	env := r.dead.Published(deadTopic)
	require.Len(t, env, 1)
	tp := env[0].Metadata.Get(dlq.KeyDeadLetterTraceparent)
	assert.Equal(t, middleware.Traceparent(dl.SpanContext()), tp)
	assert.Equal(t, a.SpanContext().SpanID().String(), env[0].Metadata.Get(dlq.KeySpanID), "the envelope names the failing attempt")
	assert.Equal(t, msg.Metadata.Get("traceparent"), env[0].Metadata.Get("traceparent"), "original metadata kept byte for byte")

	// A replay republishes with the dead-letter span as its link.
	replayed := setup(t, failTimes(0, nil), 3)
	again := redeliver(msg)
	again.Metadata.Set(dlq.KeyReplayLink, tp)
	_, err = replayed.h(again)
	require.NoError(t, err)
	rs := replayed.spans("process")
	require.Len(t, rs, 1)
	la, ok := linkTo(rs[0], dl.SpanContext())
	require.True(t, ok, "the replayed message's first attempt links to the dead-letter span")
	assert.Equal(t, middleware.LinkDeadLetter, la[middleware.AttrLink].AsString())
}

func TestTraceOutcomesAreNotErrors(t *testing.T) {
	t.Parallel()
	r := setup(t, failTimes(0, nil), 3)
	msg, _ := r.produce(t, "m-4", `{"order":4}`)
	_, err := r.h(redeliver(msg))
	require.NoError(t, err)
	_, err = r.h(redeliver(msg))
	require.NoError(t, err)
	// Same key, other payload.
	other := redeliver(msg)
	other.Payload = []byte(`{"order":"forged"}`)
	_, err = r.h(other)
	require.NoError(t, err)

	spans := r.spans("process")
	require.Len(t, spans, 3)
	for i, want := range []string{"processed", "duplicate", "conflict"} {
		assert.Equal(t, want, attr(spans[i], middleware.AttrOutcome).AsString())
		assert.Equal(t, codes.Unset, spans[i].Status().Code, "%s is an outcome, not an error", want)
	}
}

func TestLogsCarryTheAttemptSpan(t *testing.T) {
	t.Parallel()
	r := setup(t, failTimes(1, errFlaky), 3)
	msg, _ := r.produce(t, "m-5", `{"order":5}`)
	_, err := r.h(msg)
	require.NoError(t, err)
	spans := r.spans("process")
	require.Len(t, spans, 2)
	recs := r.logs.all()
	require.NotEmpty(t, recs)
	last := recs[len(recs)-1]
	assert.Equal(t, "surely: delivery ended", last.msg)
	assert.Equal(t, spans[1].SpanContext().SpanID(), last.sc.SpanID(), "the outcome is logged with the last attempt's span")
}

// ctxLog is a slog.Handler that keeps each record's span context, read
// from the context, as a trace-correlating handler would.
type ctxLog struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	msg string
	sc  trace.SpanContext
}

func (l *ctxLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *ctxLog) Handle(ctx context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, logRec{msg: r.Message, sc: trace.SpanContextFromContext(ctx)})
	return nil
}
func (l *ctxLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *ctxLog) WithGroup(string) slog.Handler      { return l }
func (l *ctxLog) all() []logRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logRec(nil), l.recs...)
}

// counts sums every counter of the run by name.
func counts(t *testing.T, reader *sdkmetric.ManualReader) (map[string]int64, map[string]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	sums, hists := map[string]int64{}, map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[m.Name] += p.Value
					for _, kv := range p.Attributes.ToSlice() {
						assert.Contains(t, []attribute.Key{"topic", "handler", "outcome", "reason"}, kv.Key, "%s: no high-cardinality attribute", m.Name)
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					hists[m.Name] += p.Count
				}
			}
		}
	}
	return sums, hists
}

// A scripted run: every outcome a known number of times, on a clock
// synctest controls.
func TestMetricsCountEachOutcome(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var lose func()
		fn := func(msg *message.Message) ([]*message.Message, error) {
			switch string(msg.Payload) {
			case "flaky-once":
				if idempotency.KeyFrom(msg.Context()) != "" {
					if op, _ := idempotency.OperationFrom(msg.Context()); op.Attempt == 1 {
						return nil, errFlaky
					}
				}
			case "declined":
				return nil, retry.Permanent(errors.New("card declined"))
			case "slow":
				lose() // another consumer takes the lease over meanwhile
			case "down":
				return nil, errFlaky
			}
			return nil, nil
		}
		r := setup(t, fn, 2)
		ctx := context.Background()
		deliver := func(uuid, payload string) error {
			msg, _ := r.produce(t, uuid, payload)
			_, err := r.h(msg)
			return err
		}
		// 3 processed, the second after one in-process retry.
		require.NoError(t, deliver("p1", "ok"))
		require.NoError(t, deliver("p2", "flaky-once"))
		require.NoError(t, deliver("p3", "ok"))
		// 2 duplicates.
		require.NoError(t, deliver("p1", "ok"))
		require.NoError(t, deliver("p3", "ok"))
		// 1 permanent failure, 1 conflict: 2 dead letters.
		require.NoError(t, deliver("d1", "declined"))
		require.NoError(t, deliver("p1", "forged"))
		// 1 in progress elsewhere.
		_, err := r.store.Claim(ctx, idempotency.ClaimRequest{Namespace: "orders", Key: "busy", Fingerprint: fingerprint(t, "busy", "ok"), Lease: time.Minute, MaxAttempts: 5})
		require.NoError(t, err)
		var ip *middleware.InProgressError
		require.ErrorAs(t, deliver("busy", "ok"), &ip)
		// 1 takeover: a consumer died holding the lease, which expired.
		_, err = r.store.Claim(ctx, idempotency.ClaimRequest{Namespace: "orders", Key: "orphan", Fingerprint: fingerprint(t, "orphan", "ok"), Lease: time.Second, MaxAttempts: 5})
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		require.NoError(t, deliver("orphan", "ok"))
		// 1 fencing rejection: the lease expires under a slow handler and another claim takes over.
		lose = func() {
			time.Sleep(2 * time.Hour) // past the extension limit (10 x lease) and the lease
			_, err := r.store.Claim(ctx, idempotency.ClaimRequest{Namespace: "orders", Key: "slow", Fingerprint: fingerprint(t, "slow", "slow"), Lease: time.Minute, MaxAttempts: 5})
			require.NoError(t, err)
		}
		var ll *middleware.LeaseLostError
		require.ErrorAs(t, deliver("slow", "slow"), &ll)
		// 2 transient failures in one delivery (2 in-process attempts), nacked.
		require.ErrorIs(t, deliver("t1", "down"), errFlaky)
		// 1 dead letter that could not be published.
		failing, err := handler.New(fn, handler.WithStore(r.store, "orders"), handler.WithDeadLetter(faults.NewPublisher(1), deadTopic),
			handler.WithBreaker(nil), handler.WithMeterProvider(r.mp))
		require.NoError(t, err)
		msg, _ := r.produce(t, "d2", "declined")
		_, err = failing(msg)
		require.ErrorIs(t, err, faults.ErrInjected)

		sums, hists := counts(t, r.reader)
		assert.Equal(t, map[string]int64{
			middleware.MetricProcessed:          4, // p1, p2, p3, orphan
			middleware.MetricDuplicates:         2,
			middleware.MetricInProgress:         1,
			middleware.MetricConflicts:          1,
			middleware.MetricLeaseTakeovers:     1,
			middleware.MetricLeaseLost:          1,
			middleware.MetricRetries:            3, // p2 once, t1 twice
			middleware.MetricDeadLetters:        2, // d1, forged p1
			middleware.MetricDeadLetterFailures: 1,
		}, sums)
		assert.Equal(t, uint64(12), hists[middleware.MetricHandlerDuration], "one per delivery")
		assert.Equal(t, uint64(12), hists[middleware.MetricEndToEndLatency], "every message was stamped by propagate")
	})
}

// Each counter's data point carries the delivery's outcome (and a dead
// letter its reason), whichever deliveries came before with other outcomes.
func TestMetricsAttributes(t *testing.T) {
	t.Parallel()
	r := setup(t, func(msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "declined" {
			return nil, retry.Permanent(errors.New("card declined"))
		}
		return nil, nil
	}, 1)
	for _, d := range []struct{ uuid, payload string }{{"a1", "ok"}, {"a2", "declined"}, {"a3", "ok"}, {"a1", "ok"}} {
		msg, _ := r.produce(t, d.uuid, d.payload)
		_, err := r.h(msg)
		require.NoError(t, err)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	got := map[string][]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				o, _ := p.Attributes.Value(middleware.AttrMetricOutcome)
				reason, _ := p.Attributes.Value(middleware.AttrReason)
				got[m.Name] = append(got[m.Name], fmt.Sprintf("%s/%s=%d", o.AsString(), reason.AsString(), p.Value))
			}
		}
	}
	assert.Equal(t, map[string][]string{
		middleware.MetricProcessed:   {"processed/=2"},
		middleware.MetricDuplicates:  {"duplicate/=1"},
		middleware.MetricDeadLetters: {"dead_lettered/permanent=1"},
	}, got)
}

func fingerprint(t *testing.T, key, payload string) string {
	t.Helper()
	ex, err := idempotency.NewExtractor()
	require.NoError(t, err)
	msg := message.NewMessage(key, []byte(payload))
	id, err := ex.Extract(msg)
	require.NoError(t, err)
	return id.Fingerprint
}

// Trace on its own around a handler: one span per delivery, the handler's
// error recorded, the context restored; a panic still ends the span.
func TestTraceStandalone(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr, err := middleware.Trace(tp)
	require.NoError(t, err)
	h := tr(func(msg *message.Message) ([]*message.Message, error) {
		require.True(t, trace.SpanContextFromContext(msg.Context()).IsValid(), "the handler runs inside the span")
		if string(msg.Payload) == "panic" {
			panic("boom")
		}
		return nil, errFlaky
	})
	msg := message.NewMessage("u-1", []byte("x"))
	before := msg.Context()
	_, err = h(msg)
	require.ErrorIs(t, err, errFlaky)
	assert.Equal(t, before, msg.Context(), "context restored")
	require.Panics(t, func() { _, _ = h(message.NewMessage("u-2", []byte("panic"))) })

	spans := rec.Ended()
	require.Len(t, spans, 2)
	assert.Equal(t, "retry", attr(spans[0], middleware.AttrOutcome).AsString())
	assert.Equal(t, codes.Error, spans[0].Status().Code)
	assert.Equal(t, "watermill", attr(spans[0], "messaging.system").AsString(), "the default system")
	assert.Equal(t, codes.Error, spans[1].Status().Code, "a panic ends its span as an error")

	for _, o := range []middleware.Option{middleware.WithPropagator(nil), middleware.WithMessagingSystem("")} {
		_, err := middleware.Trace(tp, o)
		require.ErrorIs(t, err, middleware.ErrInvalidOption)
	}
	_, err = middleware.Trace(nil)
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
	_, err = middleware.Observe(middleware.WithMeterProvider(nil))
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
}
