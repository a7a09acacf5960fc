// Package idempotency defines operation identity and the durable dedup
// record that surely claims before a business effect and completes after it.
//
// # Operation identity
//
// Every message carries an operation key. An [Extractor] tries its
// [KeySource]s in order: by default the metadata entry [DefaultMetadataKey]
// ("idempotency_key"), then the Watermill message UUID. Other sources read
// the CloudEvents ce_source/ce_id pair, a field of a JSON payload, or call a
// user function. A key longer than 512 bytes, not UTF-8 or with
// control characters is rejected ([ErrInvalidKey]), never stored. The
// fingerprint is the SHA-256 of the payload (and optionally selected
// metadata): the same key with another fingerprint is a conflict.
//
// # The state machine
//
// One record per (namespace, key), the same in every [Store]:
//
//	           claim                         complete (token matches)
//	(none) ─────────────▶ IN_PROGRESS ─────────────────────────────▶ DONE (kept for the retention)
//	                        │   ▲  lease expires / release(failure)
//	                        ▼   │
//	                      FAILED ── claim again ──▶ IN_PROGRESS
//	        release(final) or budget spent ──▶ EXHAUSTED ─▶ dead letter
//
// Claim returns exactly one [Status]:
//
//   - [Acquired]: the caller owns a lease (a fresh fencing token). Attempt
//     counts every claim ever made, so a message that kills its process is
//     counted too. [ClaimResult.Previous] says how the previous attempt ended;
//     [ResultUnknown] means its lease expired: the owner died mid-effect.
//   - [Completed]: DONE; the stored [Outcome] (with the produced messages) is returned.
//   - [InProgress]: a live lease is held by another owner, or the last
//     attempt's retry-after delay has not passed; do not run, do not count a
//     failure, nack with a delay of [ClaimResult.Wait].
//   - [Conflict]: the key was claimed with another fingerprint.
//   - [Exhausted]: a final failure was released, or the budget is spent:
//     the claim is refused when Attempts-Canceled >= MaxAttempts.
//
// The checks run in this order: a fingerprint that differs from the stored
// one is a Conflict whatever the state (a DONE record must not ack another
// payload as its duplicate); then DONE, a live lease, a pending retry-after
// delay, the budget.
//
// # Retry-after delays
//
// A Release whose [Failure] carries RetryAfter (the handler returned
// retry.After(d, err)) keeps [Record.NotBefore] = the store's now + d. Until
// then a claim returns InProgress, charges nothing, and says in
// [ClaimResult.Wait] how long is left, so a broker that redelivers early
// (one with no delayed nack of its own) only causes another nack: the next
// attempt runs no sooner than d after the failure, by the store's clock.
// The record is kept a retention after NotBefore. A final or canceled
// release ignores RetryAfter. After the budget's last attempt the delay
// still runs before the claim that finds the budget spent.
//
// [ClaimResult.Wait] of every InProgress claim is measured by the store, on
// its clock (the live lease's remaining time, or the remaining delay): a
// caller paces its redelivery with it, never with Until against its own
// clock, which may be ahead of or behind the store's.
//
// Complete, Release and Extend succeed only while the lease's token is the
// record's current one; otherwise they return [ErrLeaseLost] and change
// nothing, so a stale owner can neither overwrite nor delete its successor's
// record. Fencing is by token, not by time: an owner whose lease expired
// but that nobody has claimed since still holds the current token, and its
// Complete, Release or Extend succeed (the effect did commit; reviving the
// lease is safe because nobody else runs). Lease times come from the store's
// clock, never the caller's.
//
// Records are kept for a retention window (per store), counted from the
// last write: a DONE, FAILED or EXHAUSTED record is forgotten one retention
// after its Complete or Release, an abandoned IN_PROGRESS one a retention
// after its lease expired. Reading a record (a Completed or Exhausted
// claim, Get) does not extend it. The attempt history is bounded to 20
// entries, newest kept; error texts to 2048 bytes and stacks to 4096 (cut
// at a UTF-8 boundary).
//
// Each history entry ([AttemptRecord]) tells when the attempt started and
// ended, how it ended and why, its trace and span IDs, and which process
// ran it: [ClaimRequest.Owner] of the claim that acquired it, "host/pid"
// when the dedup step claims (at most 255 bytes). With the owners, the
// history of a key is a timeline across the processes that share the
// store: which one took over after another's lease expired, and which one
// ran the attempt that failed. An entry written before owners were kept
// has none.
//
// # Replay: reopening an exhausted record
//
// A message republished from the dead-letter archive carries its replay
// run's ID, which the dedup step passes as [ClaimRequest.Reopen]. After the
// usual checks (Conflict, DONE, live lease, pending retry-after delay) a FAILED or EXHAUSTED record
// that this ID has not reopened yet gets a fresh budget: [Record.BudgetBase]
// is set to Attempts-Canceled, so the budget is charged
// Attempts-Canceled-BudgetBase from then on, and [Record.ReopenedBy] to the
// ID. The attempt counter keeps growing. A redelivered copy of the
// replayed message (same ID) does not reopen the record again, a later run
// (another ID) does, and a DONE record is never reopened.
//
// # Stores
//
// The state machine is written once, in Go, as pure functions over a
// record, which memstore and sqlstore run; the conformance suite
// (idempotencytest.Run, its Transitions test) holds every store to them,
// the Lua scripts of redisstore included.
//
// idempotency/redisstore (lease mode on Redis), idempotency/sqlstore
// (PostgreSQL, MySQL/MariaDB, SQLite; lease mode and the transactional
// inbox), idempotency/memstore (tests and examples only). Every store runs
// the conformance suite in idempotency/idempotencytest.
//
// A store that can do more than [Store] says so by implementing an
// optional interface declared here, as a database/sql driver implements
// driver.QueryerContext: [Lister] (a read-only listing of the records,
// for "surely ops ls"), [RecordsReader] (many records of a namespace in
// one round trip, for replays) and [RetentionReporter]. Code that uses a
// capability checks for it with a type assertion; nothing is registered.
// The three stores implement all three, and a store written in another
// module offers them the same way (examples/externalstore).
//
// # Configuration
//
// [NewExtractor] and the stores' constructors take one [Option] type. The
// options that mean the same for several of them are defined here:
// [WithRetention] (every store), [WithLogger] (redisstore, sqlstore) and
// [WithClock] (memstore; the other stores use their server's clock); each
// store's own options are in its package (redisstore.WithPrefix,
// sqlstore.WithTable, ...), the Extractor's here ([WithSources],
// [WithFingerprintMetadata]). A constructor given an invalid option, a nil
// one, or one it does not use returns an error wrapping [ErrInvalidOption].
package idempotency
