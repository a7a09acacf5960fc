package middleware

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of the tracer (Trace) and the
// meter (Observe) of surely's chain.
const ScopeName = "github.com/surely-dev/surely"

// The metrics Observe records through WithMeterProvider: counters, but the
// two histograms (in seconds). Each carries the attributes AttrTopic,
// AttrHandler and AttrMetricOutcome; MetricDeadLetters also AttrReason.
// No attribute ever holds a key, a UUID or another value of unbounded
// cardinality.
const (
	// MetricProcessed counts the deliveries whose handler ran and committed
	// (delivery.OutcomeProcessed, OutcomeProcessedWithoutDedup).
	MetricProcessed = "surely.messages.processed"
	// MetricDuplicates counts the deliveries of an operation already done.
	MetricDuplicates = "surely.messages.duplicates"
	// MetricInProgress counts the deliveries nacked because another owner
	// held the lease.
	MetricInProgress = "surely.messages.in_progress"
	// MetricConflicts counts the payload conflicts (a key seen with another
	// fingerprint).
	MetricConflicts = "surely.messages.conflicts"
	// MetricLeaseTakeovers counts the claims that took over an expired lease.
	MetricLeaseTakeovers = "surely.lease.takeovers"
	// MetricLeaseLost counts the attempts whose lease was taken over
	// (fencing refused their Complete, Release or extension).
	MetricLeaseLost = "surely.lease.lost"
	// MetricRetries counts the transient failures that were retried.
	MetricRetries = "surely.retries"
	// MetricDeadLetters counts the dead letters published.
	MetricDeadLetters = "surely.dead_letters"
	// MetricDeadLetterFailures counts the dead-letter publishes that failed.
	MetricDeadLetterFailures = "surely.dead_letter.publish_failures"
	// MetricHandlerDuration is the histogram of the time a delivery spent
	// in the chain.
	MetricHandlerDuration = "surely.handler.duration"
	// MetricEndToEndLatency is the histogram of the time from the first
	// publish (propagate.KeyPublishedAt) to the end of the delivery.
	MetricEndToEndLatency = "surely.end_to_end.latency"
)

// The attributes of the metrics.
const (
	// AttrTopic is the topic the message was consumed from.
	AttrTopic = attribute.Key("topic")
	// AttrHandler is the Watermill handler name.
	AttrHandler = attribute.Key("handler")
	// AttrMetricOutcome is the delivery's delivery.Outcome.
	AttrMetricOutcome = attribute.Key("outcome")
	// AttrReason is the dead-letter reason (a dlq.Reason).
	AttrReason = attribute.Key("reason")
)

// The span attributes surely adds to the messaging semantic conventions:
// on each attempt span (Trace), and, for AttrReplayID and AttrReplayOf,
// on the span of a replay's publish (dlq/replay).
const (
	// AttrOperationKey is the operation key.
	AttrOperationKey = attribute.Key("surely.operation_key")
	// AttrAttempt is the durable attempt number.
	AttrAttempt = attribute.Key("surely.attempt")
	// AttrDeliveryCount is the broker's delivery count, when it reports one.
	AttrDeliveryCount = attribute.Key("surely.delivery_count")
	// AttrOutcome is the delivery's delivery.Outcome.
	AttrOutcome = attribute.Key("surely.outcome")
	// AttrPrevious is how the previous attempt ended (failed, canceled,
	// unknown), on an attempt span and on a LinkPreviousAttempt link.
	AttrPrevious = attribute.Key("surely.previous")
	// AttrDeadLetterReason is the dead-letter reason (a dlq.Reason).
	AttrDeadLetterReason = attribute.Key("surely.dead_letter.reason")
	// AttrLink says what a link points to: LinkCreation,
	// LinkPreviousAttempt or LinkDeadLetter.
	AttrLink = attribute.Key("surely.link")
	// AttrReplayID is the replay run, on a replay's publish span.
	AttrReplayID = attribute.Key("surely.replay_id")
	// AttrReplayOf is the archived entry replayed, on a replay's publish
	// span.
	AttrReplayOf = attribute.Key("surely.replay_of")
)

// The values of AttrLink.
const (
	// LinkCreation: the message's creation context (the producer's span).
	LinkCreation = "creation"
	// LinkPreviousAttempt: the span of the attempt before this one, in this
	// process or, through the store's attempt ledger, in another.
	LinkPreviousAttempt = "previous_attempt"
	// LinkDeadLetter: the dead-letter span of the message a replay
	// republished.
	LinkDeadLetter = "dead_letter"
)
