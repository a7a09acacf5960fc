// Package chain holds what the steps of surely's chain (package
// middleware) share with package handler, which assembles them: the
// reserved keyless namespace and the names of the metrics, span
// attributes and links.
package chain

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of surely's tracer and meter.
const ScopeName = "github.com/surely-dev/surely"

// Metric names, all with the attributes topic, handler and outcome (dead
// letters also reason). No attribute ever holds a key, a UUID or another
// value of unbounded cardinality.
const (
	MetricProcessed          = "surely.messages.processed"
	MetricDuplicates         = "surely.messages.duplicates"
	MetricInProgress         = "surely.messages.in_progress"
	MetricConflicts          = "surely.messages.conflicts"
	MetricLeaseTakeovers     = "surely.lease.takeovers"
	MetricLeaseLost          = "surely.lease.lost"
	MetricRetries            = "surely.retries"
	MetricDeadLetters        = "surely.dead_letters"
	MetricDeadLetterFailures = "surely.dead_letter.publish_failures"
	MetricHandlerDuration    = "surely.handler.duration"
	MetricEndToEndLatency    = "surely.end_to_end.latency"
)

// Metric attribute keys.
const (
	AttrTopic   = attribute.Key("topic")
	AttrHandler = attribute.Key("handler")
	// AttrMetricOutcome is the delivery's Outcome.
	AttrMetricOutcome = attribute.Key("outcome")
	// AttrReason is the dead-letter reason.
	AttrReason = attribute.Key("reason")
)

// Span attributes surely adds to the messaging semantic conventions.
const (
	AttrOperationKey  = attribute.Key("surely.operation_key")
	AttrAttempt       = attribute.Key("surely.attempt")
	AttrDeliveryCount = attribute.Key("surely.delivery_count")
	AttrOutcome       = attribute.Key("surely.outcome")
	// AttrPrevious is how the previous attempt ended (failed, canceled,
	// unknown), on an attempt span and on a previous_attempt link.
	AttrPrevious = attribute.Key("surely.previous")
	// AttrDeadLetterReason is the dead-letter reason (dlq.Reason).
	AttrDeadLetterReason = attribute.Key("surely.dead_letter.reason")
	// AttrLink says what a link points to: LinkCreation,
	// LinkPreviousAttempt or LinkDeadLetter.
	AttrLink = attribute.Key("surely.link")
)

// Values of AttrLink.
const (
	// LinkCreation: the message's creation context (the producer's span).
	LinkCreation = "creation"
	// LinkPreviousAttempt: the span of the attempt before this one, in this
	// process or, through the store's attempt ledger, in another.
	LinkPreviousAttempt = "previous_attempt"
	// LinkDeadLetter: the dead-letter span of the message a replay republished.
	LinkDeadLetter = "dead_letter"
)
