package middleware

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/propagate"
)

type metrics struct {
	processed, duplicates, inProgress, conflicts metric.Int64Counter
	takeovers, leaseLost, retries                metric.Int64Counter
	deadLetters, deadLetterFailures              metric.Int64Counter
	duration, latency                            metric.Float64Histogram

	// opts caches the attribute set of each (topic, handler, outcome), all
	// of bounded cardinality: a delivery builds none.
	opts sync.Map // attrKey -> metric.MeasurementOption
}

type attrKey struct {
	topic, handler string
	outcome        delivery.Outcome
}

// attrs returns the measurement option of the attributes topic, handler
// and outcome.
func (m *metrics) attrs(topic, handler string, o delivery.Outcome) metric.MeasurementOption {
	k := attrKey{topic, handler, o}
	if v, ok := m.opts.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := m.opts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(
		AttrTopic.String(topic), AttrHandler.String(handler), AttrMetricOutcome.String(string(o)))))
	return v.(metric.MeasurementOption)
}

// WithMeterProvider records surely's metrics through mp (the OTel metrics
// API; surely never installs an SDK). Per delivery, Observe counts its
// outcome (processed, duplicate, in progress elsewhere, payload conflict,
// fencing rejection, dead letter, failed dead-letter publish), the
// transient failures that were retried, the claims that took over an
// expired lease, and records the time spent in the chain and, when the
// producer stamped propagate.KeyPublishedAt, the end-to-end latency from
// the first publish. Taken by Observe.
//
// The instruments, of the meter "github.com/surely-dev/surely": the
// counters surely.messages.processed, surely.messages.duplicates,
// surely.messages.in_progress, surely.messages.conflicts,
// surely.lease.takeovers, surely.lease.lost, surely.retries,
// surely.dead_letters and surely.dead_letter.publish_failures, and the
// histograms surely.handler.duration and surely.end_to_end.latency (in
// seconds). Each carries the attributes topic, handler and outcome (a
// delivery.Outcome); surely.dead_letters also reason (a dlq.Reason). No
// attribute ever holds a key, a UUID or another value of unbounded
// cardinality.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidOption)
		}
		s.Put(options.MeterProvider, mp)
		return nil
	})
}

func newMetrics(m metric.Meter) (*metrics, error) {
	var (
		ms  metrics
		err error
	)
	counter := func(dst *metric.Int64Counter, name, desc, unit string) {
		if err == nil {
			*dst, err = m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		}
	}
	counter(&ms.processed, MetricProcessed, "Messages whose effect committed, then acked.", "{message}")
	counter(&ms.duplicates, MetricDuplicates, "Deliveries of an operation already done: acked without running the handler.", "{message}")
	counter(&ms.inProgress, MetricInProgress, "Deliveries that found the operation leased by another live owner: nacked with a delay.", "{message}")
	counter(&ms.conflicts, MetricConflicts, "Messages whose key was first seen with another payload: dead-lettered.", "{message}")
	counter(&ms.takeovers, MetricLeaseTakeovers, "Claims that took over an expired lease: the previous owner died or hung (previous attempt unknown).", "{claim}")
	counter(&ms.leaseLost, MetricLeaseLost, "Attempts whose Complete was refused by fencing: their lease had been taken over.", "{attempt}")
	counter(&ms.retries, MetricRetries, "Attempts that failed transiently and were retried, in process or by redelivery.", "{attempt}")
	counter(&ms.deadLetters, MetricDeadLetters, "Messages published to the dead letter, then acked.", "{message}")
	counter(&ms.deadLetterFailures, MetricDeadLetterFailures, "Dead-letter publishes that failed: the source was nacked.", "{message}")
	if err != nil {
		return nil, err
	}
	if ms.duration, err = m.Float64Histogram(MetricHandlerDuration, metric.WithUnit("s"),
		metric.WithDescription("Time one delivery spent in the chain, all its in-process attempts included.")); err != nil {
		return nil, err
	}
	if ms.latency, err = m.Float64Histogram(MetricEndToEndLatency, metric.WithUnit("s"),
		metric.WithDescription("Time from the message's first publish (propagate.KeyPublishedAt) to the end of this delivery.")); err != nil {
		return nil, err
	}
	return &ms, nil
}

// record counts one delivery.
func (m *metrics) record(ctx context.Context, msg *message.Message, rep *report, d time.Duration) {
	opt := m.attrs(message.SubscribeTopicFromCtx(ctx), message.HandlerNameFromCtx(ctx), rep.outcome)
	switch rep.outcome {
	case delivery.OutcomeProcessed, delivery.OutcomeProcessedWithoutDedup:
		m.processed.Add(ctx, 1, opt)
	case delivery.OutcomeDuplicate:
		m.duplicates.Add(ctx, 1, opt)
	case delivery.OutcomeInProgress:
		m.inProgress.Add(ctx, 1, opt)
	case delivery.OutcomeLeaseLost:
		m.leaseLost.Add(ctx, 1, opt)
	case delivery.OutcomeDeadLettered:
		m.deadLetters.Add(ctx, 1, opt, metric.WithAttributes(AttrReason.String(rep.reason)))
		if rep.reason == string(dlq.ReasonConflict) {
			m.conflicts.Add(ctx, 1, opt)
		}
	case delivery.OutcomeDeadLetterFailed:
		m.deadLetterFailures.Add(ctx, 1, opt)
	}
	// Every in-process attempt but the last was a transient failure that
	// Retry retried; the last one too when the delivery ends in retry.
	retried := max(rep.attempts, 1) - 1
	if rep.outcome == delivery.OutcomeRetry {
		retried++
	}
	if retried > 0 {
		m.retries.Add(ctx, int64(retried), opt)
	}
	if rep.takeovers > 0 {
		m.takeovers.Add(ctx, int64(rep.takeovers), opt)
	}
	m.duration.Record(ctx, d.Seconds(), opt)
	if v := msg.Metadata.Get(propagate.KeyPublishedAt); v != "" {
		if at, err := time.Parse(time.RFC3339Nano, v); err == nil {
			m.latency.Record(ctx, time.Since(at).Seconds(), opt)
		}
	}
}
