// Package dlq is surely's dead letter: the failure envelope, the publisher
// that writes it, and the FinalError that tells the middleware a message must
// not be retried.
//
// # Envelope
//
// A dead-lettered message keeps the original payload and metadata byte for
// byte. Its UUID is derived from the original's (DeadLetterUUID): the same
// for every copy, but not the original's, which brokers that deduplicate by
// message id would drop as a duplicate; the original UUID is in
// KeyOriginalUUID. surely adds metadata keys, all prefixed "surely_" and versioned
// by KeyVersion ("1"): the reason (exhausted, permanent, conflict, no_key,
// panic, decode, lease_lost), the error text and its Go type chain, the
// durable attempt count, the first and last failure times, the per-attempt
// history as JSON (bounded to MaxHistoryBytes), the original topic, handler,
// consumer group, operation key, payload fingerprint, trace and span ID, and
// the host. Every error text passes through a Redactor first, so secrets in
// error messages can be kept out.
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
// again. Every copy has the same UUID (DeadLetterID of the source), so a
// dead-letter consumer or archive dedups by UUID. A message republished by
// a replay run is a new source: its dead letter's ID also derives from the
// run (see DeadLetterID).
//
// # Archive
//
// An Archive keeps dead letters where an operator can list, query, replay
// and purge them (the surely CLI works on one). It is a Watermill
// publisher: pass it to handler.WithDeadLetter and dead letters land in it
// directly, or run Ingest to move a broker's dead-letter topic into it
// (acking each message only after the archive stored it). Three
// implementations run the conformance suite dlq/archivetest:
// dlq/redisarchive (Redis, Sentinel, Cluster), dlq/sqlarchive (PostgreSQL,
// MySQL/MariaDB, SQLite) and dlq/memarchive (tests and examples only).
// Filter.Match is the reference of what a Filter selects. Nothing is
// evicted unless a retention is configured explicitly (WithRetention of
// each implementation, applied by its Prune, which logs what it deleted).
//
// RegisterArchiveMetrics exports the backlog as two OTel gauges per
// original topic and reason, MetricArchived and MetricOldestAge, read from
// Stats at most once per interval; its doc has Prometheus alert rules.
package dlq
