package middleware

import (
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/chain"
	"github.com/surely-dev/surely/internal/defaults"
)

// Names the tests of package middleware_test use for what package
// middleware does not export: the types handler exports (defined in
// internal/chain), the telemetry names, two defaults, the option that
// shortens the lease extension, and the traceparent formatter.

type (
	Outcome          = delivery.Outcome
	OutcomeParams    = delivery.OutcomeParams
	OutcomeResult    = delivery.OutcomeResult
	MissingKeyPolicy = delivery.MissingKeyPolicy
)

const (
	OutcomeProcessed    = delivery.OutcomeProcessed
	OutcomeDuplicate    = delivery.OutcomeDuplicate
	OutcomeLeaseLost    = delivery.OutcomeLeaseLost
	RejectMissingKey    = delivery.RejectMissingKey
	ProcessWithoutDedup = delivery.ProcessWithoutDedup
	KeylessNamespace    = chain.KeylessNamespace

	MetricProcessed          = chain.MetricProcessed
	MetricDuplicates         = chain.MetricDuplicates
	MetricInProgress         = chain.MetricInProgress
	MetricConflicts          = chain.MetricConflicts
	MetricLeaseTakeovers     = chain.MetricLeaseTakeovers
	MetricLeaseLost          = chain.MetricLeaseLost
	MetricRetries            = chain.MetricRetries
	MetricDeadLetters        = chain.MetricDeadLetters
	MetricDeadLetterFailures = chain.MetricDeadLetterFailures
	MetricHandlerDuration    = chain.MetricHandlerDuration
	MetricEndToEndLatency    = chain.MetricEndToEndLatency

	AttrMetricOutcome    = chain.AttrMetricOutcome
	AttrReason           = chain.AttrReason
	AttrOperationKey     = chain.AttrOperationKey
	AttrAttempt          = chain.AttrAttempt
	AttrDeliveryCount    = chain.AttrDeliveryCount
	AttrOutcome          = chain.AttrOutcome
	AttrPrevious         = chain.AttrPrevious
	AttrDeadLetterReason = chain.AttrDeadLetterReason
	AttrLink             = chain.AttrLink
	LinkCreation         = chain.LinkCreation
	LinkPreviousAttempt  = chain.LinkPreviousAttempt
	LinkDeadLetter       = chain.LinkDeadLetter

	DefaultStoreTimeout        = defaults.StoreTimeout
	DefaultDeadLetterRetryWait = defaults.DeadLetterRetryWait
)

var (
	WithExtension = withExtension
	Traceparent   = traceparent
)
