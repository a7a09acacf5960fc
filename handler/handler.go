// Package handler assembles surely's reliable handler chain in an order that
// cannot be got wrong.
//
// # Order
//
// handler.New wraps a Watermill handler in these steps, outermost first:
//
//  1. trace (WithTracerProvider): one span per attempt, linked to the
//     message's creation context and to the previous attempt
//  2. observe: outcome report, metrics (WithMeterProvider), structured log
//     (with the message context), OnOutcome callback
//  3. dead letter: a final failure is published with its context, and only
//     then acked; a failed publish nacks (nothing lost)
//  4. retry: in-process attempts with backoff and jitter inside one delivery;
//     the outage breaker pauses the consumer while most attempts fail transiently
//  5. identity: operation key and payload fingerprint
//  6. dedup: claim, then complete (or release) with fencing; lease extension
//  7. your handler, with idempotency.OperationFrom(ctx): key, attempt,
//     fencing token, and how the previous attempt ended
//
// The router acks only when the chain returns nil: after Complete, or after
// the dead-letter publish.
//
// # Required options
//
// WithStore and WithDeadLetter are required: without a store nothing is
// deduplicated, and without a dead letter a final failure could only be
// dropped or redelivered forever. New returns an error wrapping
// ErrInvalidOption when either is missing.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// ErrInvalidOption wraps every configuration error of New.
var ErrInvalidOption = errors.New("handler: invalid option")

type config struct {
	store      idempotency.Store
	namespace  string
	dlqPub     message.Publisher
	dlqTopic   string
	policy     *retry.Policy
	breaker    *retry.Breaker
	noBreaker  bool
	lease      time.Duration
	extractor  *idempotency.Extractor
	missingKey middleware.MissingKeyPolicy
	logger     *slog.Logger
	onOutcome  func(context.Context, middleware.OutcomeParams) middleware.OutcomeResult
	redact     dlq.Redactor
	group      string
	storeTO    time.Duration
	tracer     trace.TracerProvider
	meter      metric.MeterProvider
	prop       propagation.TextMapPropagator
	system     string
}

// Option configures New.
type Option func(*config) error

// WithStore sets the dedup store and the namespace of this handler's records
// (required). Use the handler name, with the consumer group when several
// groups consume one topic. middleware.KeylessNamespace is reserved (the
// attempt records of messages without a key). surely never closes the
// store's client.
func WithStore(store idempotency.Store, namespace string) Option {
	return func(c *config) error {
		if store == nil {
			return fmt.Errorf("%w: nil store", ErrInvalidOption)
		}
		if err := idempotency.ValidateNamespace(namespace); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		if namespace == middleware.KeylessNamespace {
			return fmt.Errorf("%w: namespace %q is reserved", ErrInvalidOption, namespace)
		}
		c.store, c.namespace = store, namespace
		return nil
	}
}

// WithDeadLetter publishes final failures to topic through pub (required).
// surely never closes pub.
func WithDeadLetter(pub message.Publisher, topic string) Option {
	return func(c *config) error {
		if pub == nil || topic == "" {
			return fmt.Errorf("%w: dead letter needs a publisher and a topic", ErrInvalidOption)
		}
		c.dlqPub, c.dlqTopic = pub, topic
		return nil
	}
}

// WithPolicy sets the retry policy (default retry.NewPolicy()). Its
// MaxInProcessTime must fit inside the lease.
func WithPolicy(p *retry.Policy) Option {
	return func(c *config) error {
		if p == nil {
			return fmt.Errorf("%w: nil policy", ErrInvalidOption)
		}
		c.policy = p
		return nil
	}
}

// WithBreaker sets the outage breaker (default retry.NewBreaker()); nil
// turns it off.
func WithBreaker(b *retry.Breaker) Option {
	return func(c *config) error {
		c.breaker, c.noBreaker = b, b == nil
		return nil
	}
}

// WithLease sets the dedup lease (default middleware.DefaultLease). The
// lease is extended while the handler runs, for at most 10 leases in all;
// past that the handler's context is canceled (cause
// middleware.ErrHandlerHung) and the attempt counts as failed, so a handler
// that hangs on every delivery ends dead-lettered.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: lease must be positive", ErrInvalidOption)
		}
		c.lease = d
		return nil
	}
}

// WithIdentity sets the key extractor and the missing-key policy (default:
// idempotency.NewExtractor(), middleware.RejectMissingKey). A key source
// that panics dead-letters the message (reason panic); a message without a
// key under middleware.ProcessWithoutDedup still has a bounded number of
// attempts (see middleware.ProcessWithoutDedup).
func WithIdentity(ex *idempotency.Extractor, missing middleware.MissingKeyPolicy) Option {
	return func(c *config) error {
		if ex == nil {
			return fmt.Errorf("%w: nil extractor", ErrInvalidOption)
		}
		c.extractor, c.missingKey = ex, missing
		return nil
	}
}

// WithLogger sets the structured logger. Without it, warnings that a
// guarantee is weaker than expected for a message (a handler canceled for
// outliving the longest lease hold, a lease lost, a Complete retried, a
// replay ID ignored; see middleware.WithDedupLogger) and a panicking
// OnOutcome callback go to slog.Default(), and the per-delivery outcome
// log is discarded. With it, the outcome of every delivery is logged too,
// at debug level (retry at info; dead letters, pauses and lost leases at
// warn). Every record is logged with the message context, which carries the current attempt's span
// when tracing is on: a slog.Handler that reads the trace context from ctx
// correlates logs and traces.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// WithOnOutcome calls fn once per delivery with its outcome and operation
// (middleware.OutcomeParams). A panic in fn is recovered and logged at error
// level (to slog.Default() without WithLogger); the delivery is acked or
// nacked as the chain decided.
func WithOnOutcome(fn func(context.Context, middleware.OutcomeParams) middleware.OutcomeResult) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: nil callback", ErrInvalidOption)
		}
		c.onOutcome = fn
		return nil
	}
}

// WithRedactor passes every error text through r before it is stored in the
// attempt history or written to a dead letter. A text on which r panics is
// replaced by dlq.RedactorPanicked, never written unredacted.
func WithRedactor(r dlq.Redactor) Option {
	return func(c *config) error {
		if r == nil {
			return fmt.Errorf("%w: nil redactor", ErrInvalidOption)
		}
		c.redact = r
		return nil
	}
}

// WithStoreTimeout bounds every store call (default:
// middleware.DefaultStoreTimeout, 5s, or a third of the lease when that is
// shorter). It must be shorter than the lease.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: store timeout must be positive", ErrInvalidOption)
		}
		c.storeTO = d
		return nil
	}
}

// WithConsumerGroup names the consumer group in dead letters and spans
// (messaging.consumer.group.name).
func WithConsumerGroup(group string) Option {
	return func(c *config) error { c.group = group; return nil }
}

// WithTracerProvider traces every attempt through tp (see middleware.Trace):
// one "process <topic>" span per attempt, linked to the message's creation
// context and to the previous attempt, across processes. Without it
// (default) nothing is traced and tracing costs nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalidOption)
		}
		c.tracer = tp
		return nil
	}
}

// WithMeterProvider records surely's metrics through mp (see
// middleware.WithMeterProvider). Without it (default) nothing is measured.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidOption)
		}
		c.meter = mp
		return nil
	}
}

// WithPropagator sets how the creation context is read from the message
// metadata (default propagation.TraceContext{}); match the producer's
// (package propagate). It needs WithTracerProvider.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) error {
		if p == nil {
			return fmt.Errorf("%w: nil propagator", ErrInvalidOption)
		}
		c.prop = p
		return nil
	}
}

// WithMessagingSystem sets messaging.system on spans ("nats", "rabbitmq",
// "kafka", ...; default "watermill"). It needs WithTracerProvider.
func WithMessagingSystem(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("%w: empty messaging system", ErrInvalidOption)
		}
		c.system = name
		return nil
	}
}

// New returns fn wrapped in surely's chain (see the package doc), ready for
// router.AddHandler / AddConsumerHandler.
func New(fn message.HandlerFunc, opts ...Option) (message.HandlerFunc, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidOption)
	}
	c := config{lease: middleware.DefaultLease}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.store == nil {
		return nil, fmt.Errorf("%w: WithStore is required", ErrInvalidOption)
	}
	if c.dlqPub == nil {
		return nil, fmt.Errorf("%w: WithDeadLetter is required", ErrInvalidOption)
	}
	var err error
	if c.policy == nil {
		if c.policy, err = retry.NewPolicy(); err != nil {
			return nil, err
		}
	}
	if c.policy.MaxInProcessTime() >= c.lease {
		return nil, fmt.Errorf("%w: the retry policy's in-process time %v must be shorter than the lease %v",
			ErrInvalidOption, c.policy.MaxInProcessTime(), c.lease)
	}
	if c.breaker == nil && !c.noBreaker {
		if c.breaker, err = retry.NewBreaker(); err != nil {
			return nil, err
		}
	}
	if c.extractor == nil {
		if c.extractor, err = idempotency.NewExtractor(); err != nil {
			return nil, err
		}
	}
	dopts := []dlq.Option{dlq.WithConsumerGroup(c.group)}
	dedupOpts := []middleware.DedupOption{
		middleware.WithLease(c.lease), middleware.WithMaxAttempts(c.policy.MaxAttempts()),
	}
	if c.logger != nil { // else Dedup's warnings go to slog.Default()
		dedupOpts = append(dedupOpts, middleware.WithDedupLogger(c.logger))
	}
	if c.storeTO > 0 {
		dedupOpts = append(dedupOpts, middleware.WithStoreTimeout(c.storeTO))
	}
	if c.redact != nil {
		dopts = append(dopts, dlq.WithRedactor(c.redact))
		dedupOpts = append(dedupOpts, middleware.WithHistoryRedactor(c.redact))
	}
	pub, err := dlq.NewPublisher(c.dlqPub, c.dlqTopic, dopts...)
	if err != nil {
		return nil, err
	}
	var obsOpts []middleware.ObserveOption
	if c.logger != nil { // else a panicking OnOutcome is reported to slog.Default()
		obsOpts = append(obsOpts, middleware.WithLogger(c.logger))
	}
	if c.onOutcome != nil {
		obsOpts = append(obsOpts, middleware.WithOnOutcome(c.onOutcome))
	}
	if c.meter != nil {
		obsOpts = append(obsOpts, middleware.WithMeterProvider(c.meter))
	}
	if c.tracer == nil && (c.prop != nil || c.system != "") {
		return nil, fmt.Errorf("%w: WithPropagator and WithMessagingSystem need WithTracerProvider", ErrInvalidOption)
	}

	observe, err := middleware.Observe(obsOpts...)
	if err != nil {
		return nil, err
	}
	deadLetter, err := middleware.DeadLetter(pub)
	if err != nil {
		return nil, err
	}
	retrier, err := middleware.Retry(c.policy, c.breaker)
	if err != nil {
		return nil, err
	}
	identity, err := middleware.Identity(c.extractor, c.missingKey)
	if err != nil {
		return nil, err
	}
	dedup, err := middleware.Dedup(c.store, c.namespace, dedupOpts...)
	if err != nil {
		return nil, err
	}
	// Innermost first, so that observe (or trace) ends up outermost.
	h := fn
	for _, m := range []message.HandlerMiddleware{dedup, identity, retrier, deadLetter, observe} {
		h = m(h)
	}
	if c.tracer != nil {
		topts := []middleware.TraceOption{middleware.WithConsumerGroup(c.group)}
		if c.prop != nil {
			topts = append(topts, middleware.WithPropagator(c.prop))
		}
		if c.system != "" {
			topts = append(topts, middleware.WithMessagingSystem(c.system))
		}
		tr, err := middleware.Trace(c.tracer, topts...)
		if err != nil {
			return nil, err
		}
		h = tr(h)
	}
	return h, nil
}

// NoPublish adapts a chain built by New for router.AddConsumerHandler, for
// handlers that produce no messages. Messages the chain returns (including
// those re-emitted for a duplicate) are dropped, so use it only when fn
// never produces any.
func NoPublish(h message.HandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		_, err := h(msg)
		return err
	}
}
