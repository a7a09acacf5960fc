// Package dlq is surely's dead letter: the failure envelope, the publisher
// that writes it, and the FinalError that tells the middleware a message must
// not be retried.
//
// # Envelope
//
// A dead-lettered message keeps the original payload and metadata byte for
// byte. Its UUID is derived from the original's (UUIDv5): the same for
// every copy, but not the original's, which brokers that deduplicate by
// message id would drop as a duplicate. surely adds metadata keys, all
// prefixed "surely_" (below, and a constant each: KeyReason, ...);
// ParseEnvelope reads them all into an Envelope. Every error text passes
// through a redactor first (WithRedactor), so secrets in error messages
// can be kept out; the call site, a code location, does not.
//
// # Metadata keys
//
// The keys of the envelope (version 1), and, last, those a replay
// (dlq/replay) adds to the message it republishes, which travel into the
// dead letter of a replayed message that fails again:
//
//	surely_dlq_version       KeyVersion: envelope version, "1"
//	surely_reason            KeyReason: Reason: exhausted, permanent, conflict, no_key, lease_lost, panic, decode
//	surely_error             KeyError: final error text, redacted, at most 2 KiB
//	surely_error_types       KeyErrorTypes: Go types of the error's chain, outermost first, " > " between them
//	surely_error_site        KeyErrorSite: where the error arose, "function (file.go:line)", not redacted
//	                         (when known: the panic's frame, read from the first error of the chain with a
//	                         PanicStack() string method, as *middleware.PanicError has; or the top frame of
//	                         the innermost error with a stack)
//	surely_attempts          KeyAttempts: durable attempt count, decimal (0: unknown)
//	surely_first_failure_at  KeyFirstFailureAt: first failed attempt, RFC 3339 with nanoseconds
//	surely_last_failure_at   KeyLastFailureAt: last failed attempt, RFC 3339 with nanoseconds
//	surely_dead_lettered_at  KeyDeadLetteredAt: when it was dead-lettered, RFC 3339 with nanoseconds
//	surely_history           KeyHistory: per-attempt ledger, JSON (idempotency.AttemptRecord, with the
//	                         process that ran each attempt as "owner"), at most 16 KiB:
//	                         oldest entries, then stacks of all but the newest, dropped to fit
//	surely_original_topic    KeyOriginalTopic: topic the message was consumed from
//	surely_original_uuid     KeyOriginalUUID: the message's UUID
//	surely_handler           KeyHandler: Watermill handler name
//	surely_consumer_group    KeyConsumerGroup: consumer group (WithConsumerGroup)
//	surely_operation_key     KeyOperationKey: operation key (empty for no_key)
//	surely_fingerprint       KeyFingerprint: payload fingerprint
//	surely_namespace         KeyNamespace: dedup namespace of the handler (when known)
//	surely_dedup_retention   KeyRetention: the store's retention, a Go duration (when the store reports it)
//	surely_trace_id          KeyTraceID: trace ID of the failing attempt, hex
//	surely_span_id           KeySpanID: span ID of the failing attempt, hex
//	surely_dlq_traceparent   KeyDeadLetterTraceparent: W3C traceparent of the dead-letter span (when tracing is on)
//	surely_host              KeyHost: host name of the process (os.Hostname)
//	surely_replay_of         KeyReplayOf: the archived entry a replayed message replays
//	surely_replay_id         KeyReplayID: the replay run
//	surely_replay_link       KeyReplayLink: W3C traceparent of the dead-letter span a replayed message links to
//
// A message an adapter could not decode keeps the adapter's keys
// (delivery.KeyDecodeError, delivery.KeyDecodeHeaders) in its dead letter.
//
// # Acking
//
// The dead-letter step acks the source message only after Publish returned
// nil. When the publish fails, the step returns both errors joined and the
// router nacks: the message is redelivered, nothing is lost.
//
// # Copies
//
// A message can be dead-lettered more than once: an exhausted message that
// is delivered again (its ack was lost, or the broker handed an in-flight
// message to a second consumer) finds its record EXHAUSTED and is published
// again. Every copy has the same UUID (derived from the source's), so a
// dead-letter consumer or archive dedups by UUID. A message republished by
// a replay run is a new source: its dead letter's UUID derives from its
// UUID and the run's ID, so a replayed message that fails again is a new
// archive entry, not a copy of the one it replays.
//
// # Configuration
//
// Every constructor of the dead-letter family (NewPublisher, and those of
// dlq/archive, dlq/memarchive, dlq/redisarchive, dlq/sqlarchive and
// dlq/replay) takes its required inputs as arguments and the rest as
// options of one type, Option. The options common to several of them are
// defined here (WithLogger, WithClock, WithRetention); those of one
// package in that package (archive.WithPrefix, replay.WithRate).
// A constructor given an option it does not use returns an error wrapping
// ErrInvalidOption.
//
// # Archive
//
// Package dlq/archive keeps dead letters where an operator can list,
// query, replay and purge them: the archive.Archive contract, archive.Ingest
// (a broker's dead-letter topic into an archive) and archive.RegisterMetrics
// (the backlog as OTel gauges). dlq/replay republishes archived entries.
package dlq
