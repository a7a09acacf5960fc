package dlq

// The metadata keys surely adds to a dead-lettered message, all prefixed
// "surely_" (the package doc's "Metadata keys" lists each with its value).
// ParseEnvelope reads every one into an Envelope; a Watermill handler that
// reads a dead letter's metadata itself, a query over an archive, or a
// consumer in another language, reads them by these names.
const (
	// KeyVersion holds the envelope version, "1".
	KeyVersion = "surely_dlq_version"
	// KeyReason holds the Reason.
	KeyReason = "surely_reason"
	// KeyError holds the final error's text, redacted and bounded.
	KeyError = "surely_error"
	// KeyErrorTypes holds the Go types of the error's chain, outermost
	// first.
	KeyErrorTypes = "surely_error_types"
	// KeyErrorSite holds where the error arose, when known. It is a code
	// location, not data: no redactor sees it.
	KeyErrorSite = "surely_error_site"
	// KeyAttempts holds the durable attempt count.
	KeyAttempts = "surely_attempts"
	// KeyFirstFailureAt holds when the first attempt failed.
	KeyFirstFailureAt = "surely_first_failure_at"
	// KeyLastFailureAt holds when the last attempt failed.
	KeyLastFailureAt = "surely_last_failure_at"
	// KeyDeadLetteredAt holds when the message was dead-lettered.
	KeyDeadLetteredAt = "surely_dead_lettered_at"
	// KeyHistory holds the per-attempt ledger, JSON.
	KeyHistory = "surely_history"
	// KeyOriginalTopic holds the topic the message was consumed from.
	KeyOriginalTopic = "surely_original_topic"
	// KeyOriginalUUID holds the message's UUID (the dead letter's own is
	// derived from it).
	KeyOriginalUUID = "surely_original_uuid"
	// KeyHandler holds the Watermill handler name.
	KeyHandler = "surely_handler"
	// KeyConsumerGroup holds the consumer group (WithConsumerGroup).
	KeyConsumerGroup = "surely_consumer_group"
	// KeyOperationKey holds the operation key (empty for no_key).
	KeyOperationKey = "surely_operation_key"
	// KeyFingerprint holds the payload fingerprint.
	KeyFingerprint = "surely_fingerprint"
	// KeyNamespace holds the dedup namespace of the handler, so the
	// operation's store record can be found (surely inspect, replay).
	KeyNamespace = "surely_namespace"
	// KeyRetention holds the dedup store's retention (a Go duration) when
	// the store reports it (idempotency.RetentionReporter): a replay of a
	// dead letter older than this may find its record gone.
	KeyRetention = "surely_dedup_retention"
	// KeyTraceID holds the trace ID of the failing attempt.
	KeyTraceID = "surely_trace_id"
	// KeySpanID holds the span ID of the failing attempt.
	KeySpanID = "surely_span_id"
	// KeyDeadLetterTraceparent holds the W3C traceparent of the
	// dead-letter span, when tracing is on.
	KeyDeadLetterTraceparent = "surely_dlq_traceparent"
	// KeyHost holds the host name of the process.
	KeyHost = "surely_host"
)

// The metadata keys a replay (dlq/replay) adds to a message it
// republishes; they travel into the dead letter of a replayed message that
// fails again.
const (
	// KeyReplayOf holds the ID of the archived dead letter the message
	// replays.
	KeyReplayOf = "surely_replay_of"
	// KeyReplayID holds the ID of the replay run. The dedup step passes it
	// to Claim as ClaimRequest.Reopen, so an EXHAUSTED record gets a fresh
	// budget once per replay run.
	KeyReplayID = "surely_replay_id"
	// KeyReplayLink holds the W3C traceparent of the dead-letter span, so
	// the replayed message's first attempt span links back to it.
	KeyReplayLink = "surely_replay_link"
)
