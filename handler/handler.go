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
//
// # Configuration
//
// New first validates the whole configuration, then assembles the chain.
// Every configuration error, whichever option or combination it comes
// from, wraps ErrInvalidOption; New checks up front what the middleware
// constructors would reject, and wraps their errors too should one still
// fail.
//
// The lease and the in-process retry time (the time one delivery may spend
// retrying before it nacks) must satisfy in-process time < lease. Each is
// derived from the other unless both are set: a lease alone sets the
// in-process time to min(10s, lease/3); an in-process time alone (with
// WithMaxInProcessTime, or the policy of WithPolicy) sets the lease to
// max(30s, 3 × in-process time); with neither, they are 30s and 10s; with
// both, an in-process time not shorter than the lease is an error.
//
// The retry policy is built from WithMaxAttempts, WithInProcessAttempts,
// WithBackoff and WithMaxInProcessTime, or given whole with WithPolicy
// (which excludes them). The defaults are the retry package's, defined
// there once.
//
// What a user of New needs is named here, so that wiring a handler takes
// no import of middleware: MissingKeyPolicy, OutcomeParams, OutcomeResult,
// Outcome and their values (aliases of package delivery's, which
// middleware's WithOnOutcome and Identity take as well); Permanent and
// After call retry's.
package handler

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// ErrInvalidOption wraps every configuration error of New.
var ErrInvalidOption = errors.New("handler: invalid option")

// New returns fn wrapped in surely's chain (see the package doc), ready for
// router.AddHandler / AddConsumerHandler.
func New(fn message.HandlerFunc, opts ...Option) (message.HandlerFunc, error) {
	c, err := validate(fn, opts)
	if err != nil {
		return nil, err
	}
	h, err := assemble(fn, c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return h, nil
}

// validate applies opts and checks the configuration as a whole, filling
// in every default, so that assemble has nothing left to reject.
func validate(fn message.HandlerFunc, opts []Option) (config, error) {
	var c config
	if fn == nil {
		return c, invalid("nil handler")
	}
	for i, o := range opts {
		if o == nil {
			return c, invalid("option %d is nil", i)
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	if c.store == nil {
		return c, invalid("WithStore is required")
	}
	if c.dlqPub == nil {
		return c, invalid("WithDeadLetter is required")
	}
	if c.tracer == nil && (c.prop != nil || c.system != "") {
		return c, invalid("WithPropagator and WithMessagingSystem need WithTracerProvider")
	}
	if err := c.resolvePolicy(); err != nil {
		return c, err
	}
	if c.storeTO >= c.lease { // unset (0) is middleware's default, a third of the lease at most
		return c, invalid("store timeout %v must be shorter than the lease %v", c.storeTO, c.lease)
	}
	return c, c.defaults()
}

// resolvePolicy derives the lease and the in-process time from each other
// (see the package doc) and builds the policy unless WithPolicy gave one.
func (c *config) resolvePolicy() error {
	if c.policy != nil {
		if len(c.retryOpts) > 0 || c.inProcess > 0 {
			return invalid("WithPolicy excludes WithMaxAttempts, WithInProcessAttempts, WithBackoff and WithMaxInProcessTime")
		}
		c.inProcess = c.policy.MaxInProcessTime()
	}
	switch {
	case c.lease == 0 && c.inProcess == 0:
		c.lease, c.inProcess = defaults.Lease, defaults.MaxInProcessTime
	case c.inProcess == 0:
		c.inProcess = min(defaults.MaxInProcessTime, c.lease/3)
	case c.lease == 0:
		c.lease = max(defaults.Lease, 3*c.inProcess)
	case c.inProcess >= c.lease:
		return invalid("the retry policy's in-process time %v must be shorter than the lease %v", c.inProcess, c.lease)
	}
	if c.policy != nil {
		return nil
	}
	p, err := retry.NewPolicy(append(c.retryOpts, retry.WithMaxInProcessTime(c.inProcess))...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	c.policy = p
	return nil
}

// defaults fills in the breaker and the extractor.
func (c *config) defaults() error {
	var err error
	if c.breaker == nil && !c.noBreaker {
		if c.breaker, err = retry.NewBreaker(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	if c.extractor == nil {
		if c.extractor, err = idempotency.NewExtractor(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	return nil
}

// assemble builds the chain from a validated configuration.
func assemble(fn message.HandlerFunc, c config) (message.HandlerFunc, error) {
	steps, err := c.steps()
	if err != nil {
		return nil, err
	}
	// Innermost first, so that observe (or trace) ends up outermost.
	h := fn
	for _, m := range steps {
		h = m(h)
	}
	return h, nil
}

// steps returns the chain's middlewares, innermost first.
func (c *config) steps() ([]message.HandlerMiddleware, error) {
	pub, err := dlq.NewPublisher(c.dlqPub, c.dlqTopic, c.dlqOptions()...)
	if err != nil {
		return nil, err
	}
	dedup, err := middleware.Dedup(c.store, c.namespace, c.dedupOptions()...)
	if err != nil {
		return nil, err
	}
	identity, err := middleware.Identity(c.extractor, c.missingKey)
	if err != nil {
		return nil, err
	}
	retrier, err := middleware.Retry(c.policy, c.breaker)
	if err != nil {
		return nil, err
	}
	deadLetter, err := middleware.DeadLetter(pub)
	if err != nil {
		return nil, err
	}
	observe, err := middleware.Observe(c.observeOptions()...)
	if err != nil {
		return nil, err
	}
	steps := []message.HandlerMiddleware{dedup, identity, retrier, deadLetter, observe}
	if c.tracer == nil {
		return steps, nil
	}
	tr, err := middleware.Trace(c.tracer, c.traceOptions()...)
	if err != nil {
		return nil, err
	}
	return append(steps, tr), nil
}

func (c *config) dlqOptions() []dlq.Option {
	opts := []dlq.Option{dlq.WithConsumerGroup(c.group)}
	if c.redact != nil {
		opts = append(opts, dlq.WithRedactor(c.redact))
	}
	return opts
}

func (c *config) dedupOptions() []middleware.Option {
	opts := []middleware.Option{
		middleware.WithLease(c.lease), middleware.WithMaxAttempts(c.policy.MaxAttempts()),
	}
	if c.storeTO > 0 { // else 5s, or a third of a shorter lease
		opts = append(opts, middleware.WithStoreTimeout(c.storeTO))
	}
	if c.logger != nil { // else Dedup's warnings go to slog.Default()
		opts = append(opts, middleware.WithLogger(c.logger))
	}
	if c.redact != nil {
		opts = append(opts, middleware.WithHistoryRedactor(c.redact))
	}
	return opts
}

func (c *config) observeOptions() []middleware.Option {
	var opts []middleware.Option
	if c.logger != nil { // else a panicking OnOutcome is reported to slog.Default()
		opts = append(opts, middleware.WithLogger(c.logger))
	}
	if c.onOutcome != nil {
		opts = append(opts, middleware.WithOnOutcome(c.onOutcome))
	}
	if c.meter != nil {
		opts = append(opts, middleware.WithMeterProvider(c.meter))
	}
	return opts
}

func (c *config) traceOptions() []middleware.Option {
	opts := []middleware.Option{middleware.WithConsumerGroup(c.group)}
	if c.prop != nil {
		opts = append(opts, middleware.WithPropagator(c.prop))
	}
	if c.system != "" {
		opts = append(opts, middleware.WithMessagingSystem(c.system))
	}
	return opts
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
