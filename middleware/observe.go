package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

type observeConfig struct {
	logger    *slog.Logger
	loggerSet bool
	onOutcome func(context.Context, delivery.OutcomeParams) delivery.OutcomeResult
	metrics   *metrics // nil: no metrics
}

// WithOnOutcome calls fn once per delivery with its outcome, after the
// chain decided it: fn takes a delivery.OutcomeParams and returns a
// delivery.OutcomeResult (handler.WithOnOutcome takes the same callback).
// A panic in fn is recovered and logged at error level
// (to slog.Default() without WithLogger); it changes nothing about the
// delivery, which is acked or nacked as the chain decided. Taken by
// Observe.
func WithOnOutcome(fn func(context.Context, delivery.OutcomeParams) delivery.OutcomeResult) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if fn == nil {
			return fmt.Errorf("%w: nil outcome callback", ErrInvalidOption)
		}
		s.Put(optOnOutcome, fn)
		return nil
	})
}

// Observe gives the inner steps a place to report how the delivery ended
// (so a dead-lettered message, which the router acks, is still reported as
// dead_lettered, not processed), logs the outcome with the message context
// (carrying the last attempt's span when Trace is outside it, so a slog
// handler that reads the context can correlate trace IDs), records metrics
// (WithMeterProvider) and calls the OnOutcome callback. It is the outermost
// step after Trace. It takes WithLogger, WithOnOutcome and
// WithMeterProvider.
func Observe(opts ...Option) (message.HandlerMiddleware, error) {
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "middleware.Observe", options.Logger, optOnOutcome, options.MeterProvider); err != nil {
		return nil, err
	}
	c := observeConfig{
		logger:    options.Get(set, options.Logger, slog.New(slog.DiscardHandler)),
		loggerSet: set.Has(options.Logger),
		onOutcome: options.Get[func(context.Context, delivery.OutcomeParams) delivery.OutcomeResult](set, optOnOutcome, nil),
	}
	if mp := options.Get[metric.MeterProvider](set, options.MeterProvider, nil); mp != nil {
		if c.metrics, err = newMetrics(mp.Meter(ScopeName)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			started := time.Now()
			rctx, rep := withReport(ctx) // unless Trace, outside, installed it
			msg.SetContext(rctx)
			msgs, err := h(msg)
			msg.SetContext(ctx)
			settle(ctx, rep, err)
			d := time.Since(started)
			lctx := attemptContext(ctx) // the last attempt's span, for the log's trace ID
			c.log(lctx, msg, rep, err)
			if c.metrics != nil {
				c.metrics.record(ctx, msg, rep, d)
			}
			if c.onOutcome != nil {
				c.callOnOutcome(lctx, delivery.OutcomeParams{
					Msg: msg, Outcome: rep.outcome, Attempts: rep.attempts, Attempt: rep.attempt,
					Reason: rep.reason, Cause: rep.cause, Err: err, Duration: d,
					Key: rep.op.Key, Namespace: rep.op.Namespace, Previous: rep.op.Previous,
				})
			}
			return msgs, err
		}
	}, nil
}

// callOnOutcome calls the OnOutcome callback. A panic in it is recovered
// and logged at error level (to slog.Default() when no logger was given):
// the delivery keeps the chain's verdict. Were the panic to escape, the
// router would nack a message already processed or dead-lettered, and
// every redelivery would panic again, without end.
func (c *observeConfig) callOnOutcome(ctx context.Context, p delivery.OutcomeParams) {
	defer func() {
		if pe := recovered(recover(), "outcome callback"); pe != nil {
			l := c.logger
			if !c.loggerSet {
				l = slog.Default()
			}
			l.ErrorContext(ctx, "surely: the OnOutcome callback panicked; the delivery keeps its outcome",
				"outcome", string(p.Outcome), "message_uuid", p.Msg.UUID, "panic", fmt.Sprint(pe.Value), "stack", pe.Stack)
		}
	}()
	c.onOutcome(ctx, p)
}

func fallbackOutcome(ctx context.Context, err error) delivery.Outcome {
	switch {
	case err == nil:
		return delivery.OutcomeProcessed
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return delivery.OutcomeCanceled
	default:
		return delivery.OutcomeRetry
	}
}

func (c *observeConfig) log(ctx context.Context, msg *message.Message, rep *report, err error) {
	level := slog.LevelDebug
	switch rep.outcome {
	case delivery.OutcomeDeadLettered, delivery.OutcomeDeadLetterFailed, delivery.OutcomeLeaseLost, delivery.OutcomePaused:
		level = slog.LevelWarn
	case delivery.OutcomeRetry:
		level = slog.LevelInfo
	}
	if !c.logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("outcome", string(rep.outcome)),
		slog.String("message_uuid", msg.UUID),
		slog.String("topic", message.SubscribeTopicFromCtx(ctx)),
		slog.String("handler", message.HandlerNameFromCtx(ctx)),
		slog.Int("attempts", rep.attempts),
		slog.Int("attempt", rep.attempt),
	}
	if rep.reason != "" {
		attrs = append(attrs, slog.String("reason", rep.reason))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	c.logger.LogAttrs(ctx, level, "surely: delivery ended", attrs...)
}
