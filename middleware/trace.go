package middleware

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/internal/options"
)

type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system string
	group  string
}

// WithPropagator sets how the creation context is read from the metadata
// (default propagation.TraceContext{}, W3C traceparent and tracestate). It
// must match the producer's (see package propagate). Taken by Trace.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if p == nil {
			return fmt.Errorf("%w: nil propagator", ErrInvalidOption)
		}
		s.Put(optPropagator, p)
		return nil
	})
}

// WithMessagingSystem sets messaging.system ("nats", "rabbitmq", "kafka",
// "aws_sqs", ...; default "watermill"). Taken by Trace.
func WithMessagingSystem(name string) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if name == "" {
			return fmt.Errorf("%w: empty messaging system", ErrInvalidOption)
		}
		s.Put(optSystem, name)
		return nil
	})
}

// WithConsumerGroup sets messaging.consumer.group.name (default: none).
// Taken by Trace.
func WithConsumerGroup(group string) Option {
	return options.Func[options.Middleware](func(s *options.Set) error { s.Put(optConsumerGroup, group); return nil })
}

// Trace is the outermost surely step: one "process <topic>" span of kind
// consumer per attempt, following the OpenTelemetry messaging semantic
// conventions, through tp (the OTel API only; surely never installs an SDK).
//
// Each attempt span is a child of the span in the message context, if any,
// and is linked to (the link's attribute surely.link says which):
//
//   - the message's creation context (surely.link=creation), extracted
//     from the metadata with the propagator (see package propagate for the
//     producer's side);
//   - the previous attempt's span (surely.link=previous_attempt, with
//     surely.attempt and surely.previous): in this delivery from memory; on a
//     redelivery, from the store's attempt ledger (Dedup records each
//     claim's span there, so the link crosses processes and crashes; the
//     ledger is read with one Store.Get, only on redeliveries whose span
//     is recording, i.e. sampled);
//   - on the first attempt of a replayed message, the dead-letter span of
//     the message it replays (surely.link=dead_letter, from
//     surely_replay_link).
//
// The span carries surely.outcome (processed, duplicate, in_progress, retry,
// dead_lettered, conflict, lease_lost, and paused, canceled,
// dead_letter_failed), surely.dead_letter.reason for a dead letter, the
// operation key (surely.operation_key), the durable attempt number
// (surely.attempt), how the previous attempt ended (surely.previous) and
// the broker's delivery count (surely.delivery_count) when the adapter
// reports one. The tracer is "github.com/surely-dev/surely". An attempt
// that is retried ends with outcome retry. A duplicate, a dead letter or a
// conflict is an outcome, not a span error; an error of the handler (or of
// the store) is recorded with status Error.
//
// Publishing a dead letter gets its own span, a child of the attempt span,
// whose traceparent DeadLetter writes into the envelope
// (surely_dlq_traceparent).
//
// Trace shares the per-delivery report with Observe; put it outside
// Observe (handler.New does). In-process attempts get spans of their own
// only when Retry is in the chain; attempt attributes need Identity.
//
// It takes WithPropagator, WithMessagingSystem and WithConsumerGroup.
func Trace(tp trace.TracerProvider, opts ...Option) (message.HandlerMiddleware, error) {
	if tp == nil {
		return nil, fmt.Errorf("%w: nil tracer provider", ErrInvalidOption)
	}
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "middleware.Trace", optPropagator, optSystem, optConsumerGroup); err != nil {
		return nil, err
	}
	t := &tracing{
		tracer: tp.Tracer(ScopeName),
		prop:   options.Get[propagation.TextMapPropagator](set, optPropagator, propagation.TraceContext{}),
		system: options.Get(set, optSystem, "watermill"),
		group:  options.Get(set, optConsumerGroup, ""),
	}
	return t.middleware, nil
}

// creation reads the message's creation context from its metadata with
// the propagator. A propagator that panics is contained: the attempt is
// traced without the creation link (it only serves the trace).
func (t *tracing) creation(msg *message.Message) (sc trace.SpanContext) {
	defer func() {
		if recover() != nil {
			sc = trace.SpanContext{}
		}
	}()
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(msg.Metadata)))
}

func (t *tracing) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		base, rep := withReport(ctx)
		ts := &traceState{t: t, msg: msg, parent: trace.SpanFromContext(ctx), topic: message.SubscribeTopicFromCtx(ctx)}
		ts.creation = t.creation(msg)
		if v := msg.Metadata.Get(dlq.KeyReplayLink); v != "" {
			ts.replay = parseTraceparent(v)
		}
		rep.trace = ts
		ts.start(base)
		msg.SetContext(ts.ctx)
		returned := false
		defer func() {
			if !returned { // a panic passes through (the router recovers it and nacks)
				msg.SetContext(ctx)
				ts.span.SetStatus(codes.Error, "panic")
				ts.end(delivery.OutcomeRetry, "")
				rep.trace = nil
			}
		}()
		msgs, err := h(msg)
		returned = true
		msg.SetContext(ctx)
		settle(ctx, rep, err)
		if !ts.ran {
			ts.recordError(err)
		}
		outcome := rep.outcome
		if outcome == delivery.OutcomePaused && ts.ran {
			outcome = delivery.OutcomeRetry // the paused wait came after a failed attempt
		}
		ts.end(outcome, rep.reason)
		rep.trace = nil
		return msgs, err
	}
}

// settle gives the report its final outcome when no step set one, or when
// the chain failed after a step reported success.
func settle(ctx context.Context, rep *report, err error) {
	if rep.outcome == "" || (err != nil && (rep.outcome == delivery.OutcomeProcessed || rep.outcome == delivery.OutcomeDuplicate)) {
		rep.outcome = fallbackOutcome(ctx, err)
	}
}

// traceState is one delivery's tracing: the current attempt span and what
// the next one links to.
type traceState struct {
	t        *tracing
	msg      *message.Message
	topic    string
	parent   trace.Span        // the span of the delivery's context (may be a no-op)
	creation trace.SpanContext // extracted from the metadata
	replay   trace.SpanContext // surely_replay_link

	span        trace.Span
	ctx         context.Context // the delivery's context with span
	n           int             // attempt spans started
	ran         bool            // an attempt ran through Retry
	errRecorded bool
	attempt     int // durable attempt of the current span, 0 if it claimed none

	prev        trace.SpanContext // the last ended attempt span
	prevAttempt int
}

func (ts *traceState) start(ctx context.Context) {
	t := ts.t
	links := make([]trace.Link, 0, 3)
	if ts.creation.IsValid() {
		links = append(links, trace.Link{SpanContext: ts.creation, Attributes: []attribute.KeyValue{AttrLink.String(LinkCreation)}})
	}
	if ts.n == 0 && ts.replay.IsValid() {
		links = append(links, trace.Link{SpanContext: ts.replay, Attributes: []attribute.KeyValue{AttrLink.String(LinkDeadLetter)}})
	}
	if ts.prev.IsValid() {
		la := []attribute.KeyValue{AttrLink.String(LinkPreviousAttempt)}
		if ts.prevAttempt > 0 {
			la = append(la, AttrAttempt.Int(ts.prevAttempt))
		}
		links = append(links, trace.Link{SpanContext: ts.prev, Attributes: la})
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		semconv.MessagingSystemKey.String(t.system),
		semconv.MessagingDestinationName(ts.topic),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingMessageID(ts.msg.UUID),
	)
	if t.group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(t.group))
	}
	if info, ok := delivery.InfoFrom(ctx); ok && info.Count > 0 {
		attrs = append(attrs, AttrDeliveryCount.Int(info.Count))
	}
	ctx = trace.ContextWithSpan(ctx, ts.parent)
	name := "process"
	if ts.topic != "" {
		name += " " + ts.topic
	}
	ts.ctx, ts.span = t.tracer.Start(ctx, name, //nolint:spancheck // ended by end, when the attempt is over
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	ts.n++
	ts.errRecorded, ts.attempt = false, 0
}

func (ts *traceState) end(o delivery.Outcome, reason string) {
	ts.span.SetAttributes(AttrOutcome.String(spanOutcome(o, reason)))
	if o == delivery.OutcomeDeadLettered && reason != "" {
		ts.span.SetAttributes(AttrDeadLetterReason.String(reason))
	}
	ts.span.End()
	ts.prev, ts.prevAttempt = ts.span.SpanContext(), ts.attempt
}

// runAttempt runs one in-process attempt (called by Retry through the report):
// the first uses the span Trace started, each later one ends the previous
// span (outcome retry) and starts a new one linked to it.
func (ts *traceState) runAttempt(h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	if ts.ran {
		ts.end(delivery.OutcomeRetry, "") // Retry goes on only after a transient failure
		ts.start(msg.Context())
		msg.SetContext(ts.ctx) // Retry restores its own context after the attempt
	}
	ts.ran = true
	msgs, err := h(msg)
	ts.recordError(err)
	return msgs, err
}

// claimed annotates the current span with the claim Dedup acquired and,
// on a redelivery, links it to the previous attempt's span from the ledger.
func (ts *traceState) claimed(ctx context.Context, store idempotency.Store, op *opctx.Op) {
	ts.attempt = op.Attempt
	ts.span.SetAttributes(AttrOperationKey.String(op.Key), AttrAttempt.Int(op.Attempt))
	if op.Previous != "" {
		ts.span.SetAttributes(AttrPrevious.String(string(op.Previous)))
	}
	if op.Attempt <= 1 || (ts.prev.IsValid() && ts.prevAttempt == op.Attempt-1) {
		return // first attempt, or the previous one ran in this delivery (linked at start)
	}
	if !ts.span.IsRecording() {
		return // an unsampled span drops links: no store round trip for nothing
	}
	rec, err := store.Get(ctx, op.Namespace, op.Key)
	if err != nil {
		ts.span.AddEvent("surely: attempt ledger unavailable", trace.WithAttributes(attribute.String("error", err.Error())))
		return
	}
	for _, a := range rec.History {
		if a.Attempt != op.Attempt-1 {
			continue
		}
		sc := ledgerSpan(a)
		if !sc.IsValid() {
			return
		}
		la := []attribute.KeyValue{AttrLink.String(LinkPreviousAttempt), AttrAttempt.Int(a.Attempt)}
		if a.Result != "" {
			la = append(la, AttrPrevious.String(string(a.Result)))
		}
		ts.span.AddLink(trace.Link{SpanContext: sc, Attributes: la})
		return
	}
}

func ledgerSpan(a idempotency.AttemptRecord) trace.SpanContext {
	tid, err := trace.TraceIDFromHex(a.TraceID)
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(a.SpanID)
	if err != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

func (ts *traceState) recordError(err error) {
	if ts.errRecorded || !spanError(err) {
		return
	}
	ts.errRecorded = true
	ts.span.RecordError(err)
	ts.span.SetStatus(codes.Error, err.Error())
}

// spanError reports whether err is an error of the attempt (handler or
// store), as opposed to an outcome: in progress elsewhere, lease lost,
// paused, canceled, or a dead letter decided without running the handler.
func spanError(err error) bool {
	if err == nil || errors.Is(err, ErrPaused) || errors.Is(err, context.Canceled) {
		return false
	}
	var ip *InProgressError
	var ll *LeaseLostError
	if errors.As(err, &ip) || errors.As(err, &ll) {
		return false
	}
	if fe, ok := dlq.AsFinal(err); ok {
		switch {
		case errors.Is(err, ErrExhausted), errors.Is(err, ErrConflict), errors.Is(err, ErrUndecodable),
			fe.Reason == dlq.ReasonNoKey, fe.Reason == dlq.ReasonConflict, fe.Reason == dlq.ReasonDecode:
			return false
		}
	}
	return true
}

// spanOutcome maps a delivery outcome to surely.outcome.
func spanOutcome(o delivery.Outcome, reason string) string {
	switch {
	case o == delivery.OutcomeDeadLettered && reason == string(dlq.ReasonConflict):
		return "conflict"
	case o == delivery.OutcomeProcessedWithoutDedup:
		return string(delivery.OutcomeProcessed)
	case o == "":
		return string(delivery.OutcomeRetry)
	}
	return string(o)
}

// attemptContext returns ctx carrying the current attempt's span when Trace
// is in the chain: steps outside Retry (DeadLetter, Observe) see the
// context Retry restored, whose span is the delivery's first attempt.
func attemptContext(ctx context.Context) context.Context {
	r := reportFrom(ctx)
	if r == nil || r.trace == nil || r.trace.span == nil || trace.SpanContextFromContext(ctx).Equal(r.trace.span.SpanContext()) {
		return ctx
	}
	return trace.ContextWithSpan(ctx, r.trace.span)
}

// startDeadLetter starts the dead-letter span (a child of the attempt span)
// and puts its traceparent into f; end it with endDeadLetter. Without
// Trace in the chain it returns ctx and a nil span.
func startDeadLetter(ctx context.Context, msg *message.Message, f *dlq.Failure, topic string) (context.Context, trace.Span) {
	r := reportFrom(ctx)
	if r == nil || r.trace == nil {
		return ctx, nil
	}
	t := r.trace.t
	ctx, span := t.tracer.Start(ctx, "dead_letter "+topic, trace.WithSpanKind(trace.SpanKindProducer), //nolint:spancheck // the caller ends it with endDeadLetter
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(t.system),
			semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("dead_letter"),
			semconv.MessagingMessageID(envelope.DeadLetterUUID(msg.UUID)),
			AttrDeadLetterReason.String(string(f.Reason)),
		))
	f.Traceparent = traceparent(span.SpanContext())
	return ctx, span //nolint:spancheck // the caller ends it with endDeadLetter
}

func endDeadLetter(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceparent formats sc as a W3C traceparent ("" when sc is invalid).
func traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c["traceparent"]
}

// parseTraceparent parses a W3C traceparent; an invalid one gives an
// invalid SpanContext.
func parseTraceparent(v string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v})
	return trace.SpanContextFromContext(ctx)
}
