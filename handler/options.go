package handler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/retry"
)

// The types and values a user of New names for WithIdentity and
// WithOnOutcome. They are package delivery's (where middleware's Identity
// and WithOnOutcome take them too), named here as well so that wiring a
// handler takes no other import; delivery documents each.
type (
	// MissingKeyPolicy is delivery.MissingKeyPolicy: what happens to a
	// message without an operation key (see WithIdentity).
	MissingKeyPolicy = delivery.MissingKeyPolicy
	// OutcomeParams is delivery.OutcomeParams: one delivery's end, for a
	// WithOnOutcome callback.
	OutcomeParams = delivery.OutcomeParams
	// OutcomeResult is delivery.OutcomeResult: what a WithOnOutcome
	// callback returns.
	OutcomeResult = delivery.OutcomeResult
	// Outcome is delivery.Outcome: how one delivery ended in the chain.
	Outcome = delivery.Outcome
)

// The missing-key policies (delivery.RejectMissingKey, the default, and
// delivery.ProcessWithoutDedup).
const (
	RejectMissingKey    = delivery.RejectMissingKey
	ProcessWithoutDedup = delivery.ProcessWithoutDedup
)

// The outcomes of a delivery (delivery.OutcomeProcessed, ...).
const (
	OutcomeProcessed             = delivery.OutcomeProcessed
	OutcomeDuplicate             = delivery.OutcomeDuplicate
	OutcomeInProgress            = delivery.OutcomeInProgress
	OutcomeRetry                 = delivery.OutcomeRetry
	OutcomeDeadLettered          = delivery.OutcomeDeadLettered
	OutcomeDeadLetterFailed      = delivery.OutcomeDeadLetterFailed
	OutcomePaused                = delivery.OutcomePaused
	OutcomeLeaseLost             = delivery.OutcomeLeaseLost
	OutcomeCanceled              = delivery.OutcomeCanceled
	OutcomeProcessedWithoutDedup = delivery.OutcomeProcessedWithoutDedup
)

// Permanent marks err as not worth retrying: the message goes to the dead
// letter at once. It is retry.Permanent, here so that a handler needs no
// other surely package to say so.
func Permanent(err error) error { return retry.Permanent(err) }

// After asks for a retry no sooner than d from now. It is retry.After.
func After(d time.Duration, err error) error { return retry.After(d, err) }

// Option configures New. Only the With functions of this package make one.
type Option interface{ apply(*config) error }

// optionFunc is an Option made of a function.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	store      idempotency.Store
	namespace  string
	dlqPub     message.Publisher
	dlqTopic   string
	policy     *retry.Policy
	retryOpts  []retry.Option
	inProcess  time.Duration // 0: not set
	breaker    *retry.Breaker
	noBreaker  bool
	lease      time.Duration // 0: not set
	extractor  *idempotency.Extractor
	missingKey MissingKeyPolicy
	logger     *slog.Logger
	onOutcome  func(context.Context, OutcomeParams) OutcomeResult
	redact     func(text string) string
	group      string
	storeTO    time.Duration
	tracer     trace.TracerProvider
	meter      metric.MeterProvider
	prop       propagation.TextMapPropagator
	system     string
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// required is the option that sets a value (set) unless it is nil (isNil),
// which is an error naming what.
func required(isNil bool, what string, set func(*config)) Option {
	return optionFunc(func(c *config) error {
		if isNil {
			return invalid("nil %s", what)
		}
		set(c)
		return nil
	})
}

// WithStore sets the dedup store and the namespace of this handler's records
// (required). Use the handler name, with the consumer group when several
// groups consume one topic. The namespace "surely.keyless" is reserved (the
// attempt records of messages without a key). surely never closes the
// store's client.
func WithStore(store idempotency.Store, namespace string) Option {
	return optionFunc(func(c *config) error {
		if store == nil {
			return invalid("nil store")
		}
		if err := idem.ValidateNamespace(namespace); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		if namespace == idem.KeylessNamespace {
			return invalid("namespace %q is reserved", namespace)
		}
		c.store, c.namespace = store, namespace
		return nil
	})
}

// WithDeadLetter publishes final failures to topic through pub (required).
// surely never closes pub.
func WithDeadLetter(pub message.Publisher, topic string) Option {
	return optionFunc(func(c *config) error {
		if pub == nil || topic == "" {
			return invalid("dead letter needs a publisher and a topic")
		}
		c.dlqPub, c.dlqTopic = pub, topic
		return nil
	})
}

// WithPolicy sets the retry policy (default: one built from WithMaxAttempts,
// WithInProcessAttempts, WithBackoff and WithMaxInProcessTime, which it
// excludes). The policy's MaxInProcessTime counts as set (see
// WithMaxInProcessTime): with WithLease too, it must be shorter than the
// lease; without WithLease, the lease is derived from it.
func WithPolicy(p *retry.Policy) Option {
	return required(p == nil, "policy", func(c *config) { c.policy = p })
}

// retryOption records a retry option for the policy New builds, checking
// its value now so that the error names the handler option.
func retryOption(name string, o retry.Option) Option {
	return optionFunc(func(c *config) error {
		if _, err := retry.NewPolicy(o); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOption, name, err)
		}
		c.retryOpts = append(c.retryOpts, o)
		return nil
	})
}

// WithMaxAttempts sets the durable attempt budget of one message (default
// 5; n >= 1), see retry.WithMaxAttempts.
func WithMaxAttempts(n int) Option {
	return retryOption("WithMaxAttempts", retry.WithMaxAttempts(n))
}

// WithInProcessAttempts sets how many attempts one delivery makes before it
// nacks (default 3; n >= 1), see retry.WithInProcessAttempts.
func WithInProcessAttempts(n int) Option {
	return retryOption("WithInProcessAttempts", retry.WithInProcessAttempts(n))
}

// WithBackoff sets the bounds of the backoff between attempts (default
// 100ms and 10s; 0 <= initial <= maxDelay), see retry.WithBackoff.
func WithBackoff(initial, maxDelay time.Duration) Option {
	return retryOption("WithBackoff", retry.WithBackoff(initial, maxDelay))
}

// WithMaxInProcessTime bounds the time one delivery spends in in-process
// retries (d > 0), see retry.WithMaxInProcessTime. Without it, it is
// derived from the lease: min(10s, lease/3), which is the default 10s for
// the default 30s lease. Without WithLease, the lease is derived from it
// (see WithLease). With both, d must be shorter than the lease.
func WithMaxInProcessTime(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return invalid("WithMaxInProcessTime(%v): must be > 0", d)
		}
		c.inProcess = d
		return nil
	})
}

// WithBreaker sets the outage breaker (default retry.NewBreaker()); nil
// turns it off.
func WithBreaker(b *retry.Breaker) Option {
	return optionFunc(func(c *config) error {
		c.breaker, c.noBreaker = b, b == nil
		return nil
	})
}

// WithLease sets the dedup lease (at least 10ms). The lease is extended
// while the handler runs, for at most 10 leases in all; past that the
// handler's context is canceled (cause middleware.ErrHandlerHung) and the
// attempt counts as failed, so a handler that hangs on every delivery ends
// dead-lettered.
//
// Without it, the lease is derived from the in-process retry time t
// (WithMaxInProcessTime, or the policy's of WithPolicy): max(30s, 3t), so
// the default is 30s. A lease set alone lowers the in-process time to fit
// (see WithMaxInProcessTime); with both set, the in-process time must be
// shorter than the lease.
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < defaults.MinLease {
			return invalid("lease must be at least %v, got %v", defaults.MinLease, d)
		}
		c.lease = d
		return nil
	})
}

// WithIdentity sets the key extractor and the missing-key policy (default:
// idempotency.NewExtractor(), RejectMissingKey). A key source that panics
// dead-letters the message (reason panic); a message without a key under
// ProcessWithoutDedup still has a bounded number of attempts.
func WithIdentity(ex *idempotency.Extractor, missing MissingKeyPolicy) Option {
	return optionFunc(func(c *config) error {
		if ex == nil {
			return invalid("nil extractor")
		}
		if missing != RejectMissingKey && missing != ProcessWithoutDedup {
			return invalid("unknown missing-key policy %d", missing)
		}
		c.extractor, c.missingKey = ex, missing
		return nil
	})
}

// WithLogger sets the structured logger. Without it, warnings that a
// guarantee is weaker than expected for a message (a handler canceled for
// outliving the longest lease hold, a lease lost, a Complete retried, a
// replay ID ignored; see middleware.WithLogger) and a panicking
// OnOutcome callback go to slog.Default(), and the per-delivery outcome
// log is discarded. With it, the outcome of every delivery is logged too,
// at debug level (retry at info; dead letters, pauses and lost leases at
// warn). Every record is logged with the message context, which carries
// the current attempt's span when tracing is on: a slog.Handler that reads
// the trace context from ctx correlates logs and traces.
func WithLogger(l *slog.Logger) Option {
	return required(l == nil, "logger", func(c *config) { c.logger = l })
}

// WithOnOutcome calls fn once per delivery with its outcome and operation
// (OutcomeParams). A panic in fn is recovered and logged at error level (to
// slog.Default() without WithLogger); the delivery is acked or nacked as
// the chain decided.
func WithOnOutcome(fn func(context.Context, OutcomeParams) OutcomeResult) Option {
	return required(fn == nil, "callback", func(c *config) { c.onOutcome = fn })
}

// WithRedactor passes every error text through r before it is stored in the
// attempt history or written to a dead letter. A text on which r panics is
// replaced by a placeholder ("[text withheld: the redactor panicked]"), never written unredacted.
func WithRedactor(r func(text string) string) Option {
	return required(r == nil, "redactor", func(c *config) { c.redact = r })
}

// WithStoreTimeout bounds every store call (default: 5s, or a third of the
// lease when that is shorter). It must be shorter than the lease.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return invalid("store timeout must be positive")
		}
		c.storeTO = d
		return nil
	})
}

// WithConsumerGroup names the consumer group in dead letters and spans
// (messaging.consumer.group.name).
func WithConsumerGroup(group string) Option {
	return optionFunc(func(c *config) error { c.group = group; return nil })
}

// WithTracerProvider traces every attempt through tp (see middleware.Trace):
// one "process <topic>" span per attempt, linked to the message's creation
// context and to the previous attempt, across processes. Without it
// (default) nothing is traced and tracing costs nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return required(tp == nil, "tracer provider", func(c *config) { c.tracer = tp })
}

// WithMeterProvider records surely's metrics through mp (see
// middleware.WithMeterProvider, which lists them). Without it (default)
// nothing is measured.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return required(mp == nil, "meter provider", func(c *config) { c.meter = mp })
}

// WithPropagator sets how the creation context is read from the message
// metadata (default propagation.TraceContext{}); match the producer's
// (package propagate). It needs WithTracerProvider.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return required(p == nil, "propagator", func(c *config) { c.prop = p })
}

// WithMessagingSystem sets messaging.system on spans ("nats", "rabbitmq",
// "kafka", ...; default "watermill"). It needs WithTracerProvider.
func WithMessagingSystem(name string) Option {
	return optionFunc(func(c *config) error {
		if name == "" {
			return invalid("empty messaging system")
		}
		c.system = name
		return nil
	})
}
