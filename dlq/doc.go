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
