// Package replay republishes archived dead letters (an archive.Archive)
// to their original topics, with safety rails. It is the library behind
// "surely dlq replay"; it needs only the archive.Archive interface and a
// Watermill message.Publisher, and closes neither.
//
//	res, err := replay.Run(ctx, arch, publisher,
//		archive.Filter{Reason: dlq.ReasonExhausted, Topic: "orders"},
//		replay.WithRate(50), // messages per second
//		replay.WithConcurrency(4),
//		replay.WithStore(store), // optional: confirms replayed messages done
//	)
//
// Run and Resume take the options of this package and the family's
// dlq.WithLogger and dlq.WithClock (dlq.Option); an option they do not
// use is refused with dlq.ErrInvalidOption.
//
// # What a run replays
//
// A run replays the entries its filter selected when it started: Run
// lists the selection once (without payloads) and saves its highest Seq
// with the run (archive.ReplayRun.Until); every call of the run, Resume
// included, stops there. An entry archived later, for instance the dead
// letter of a message the run replayed that failed again, is left to
// another run, and so is any entry whose metadata carries this run's
// surely_replay_id: replayed by the same run, its next failure would be
// dead-lettered under its own ID, a copy of itself, and the operation
// would have no open entry left. So each operation that keeps failing
// ends a run with one open entry, its latest dead letter. (A run saved
// without a bound gets one when it is resumed.)
//
// # What is republished
//
// Each selected entry, in Seq order, is republished to its original topic
// (or WithTarget) as the original message: its payload, its original
// UUID (surely_original_uuid) and its original metadata, without the
// envelope's surely_* keys, plus three keys of the replay:
// surely_replay_of (the entry ID), surely_replay_id (the run ID) and
// surely_replay_link (the dead-letter span's traceparent, when the envelope
// has one). The operation key therefore stays the same: the handler's
// dedup record is found again.
//
// WithNewKey is the deliberate exception: each message gets a new UUID
// (a UUIDv5 derived from the run and entry IDs, so a repeated publish of
// one entry by one run keeps it) that is also written into the metadata
// key the default extractor reads first (idempotency.DefaultMetadataKey,
// or the key WithNewKey names). The handler then
// treats it as a new operation, whatever the old record says. This works
// only for handlers whose key comes from that metadata key or from the
// message UUID, not from a payload field or CloudEvents attributes. It is
// logged as a warning.
//
// Brokers that drop a publish whose message ID they have seen recently
// (JetStream's Nats-Msg-Id within the stream's duplicate window, 2 minutes
// by default; SQS FIFO deduplication) drop a replay of a message published
// within that window, since the replay keeps the original UUID.
//
// # Replay and the dedup record: Reopen
//
// A dead letter of reason exhausted has an EXHAUSTED dedup record: its
// budget is spent, and a plain redelivery would be dead-lettered again
// without running. The dedup step passes a message's surely_replay_id to
// the store as idempotency.ClaimRequest.Reopen, and the store gives an
// EXHAUSTED (or FAILED) record a fresh attempt budget once per replay run:
// the attempts counter keeps growing (the history shows every attempt), the
// record remembers the run (Record.ReopenedBy), and a redelivered copy of
// the replayed message does not reopen it again, so a replayed message
// that keeps failing is dead-lettered again after one budget. A DONE
// record is never reopened: replaying a message whose operation completed
// is acked as a duplicate, without running the handler.
//
// # Rails
//
//   - Rate: at most WithRate publishes per second on the run's clock.
//     The first publish goes at once and the second 1/Rate later: no burst
//     at the start. Then slot k is due at start + k/Rate: a publish that
//     comes late by up to max(1/Rate, 100ms) (timer and scheduler jitter
//     on a busy machine) goes at once, so the long-run rate holds; one
//     later than that starts a new schedule, without catching up. So any
//     window of length T holds at most Rate×(T+max(1/Rate, 100ms))+1
//     publishes.
//     WithConcurrency bounds the publishes in flight.
//   - Max: at most WithMax messages per call; a run stopped by Max is
//     saved "paused" and Resume publishes the next ones.
//   - DryRun: every entry is decided (would replay, or would be refused and
//     why), reported through WithProgress and the log; nothing is published,
//     marked or saved.
//   - Retention guard: an entry whose dedup record may be gone could,
//     replayed, repeat a completed effect. It is refused (counted,
//     logged, reported with the reason) unless WithForce. A record's
//     retention runs from its own last write, not from the dead letter:
//     for a conflict that write is the other payload's DONE, possibly a
//     whole retention before the dead letter.
//     With WithStore (the CLI's --store) the guard reads the record
//     of the entry's operation (surely_namespace, dlq.KeyOperationKey):
//     a record whose ExpiresAt has passed, or that is gone
//     (idempotency.ErrNotFound: it expired), is refused, and so is an
//     entry whose record cannot be read; a retention shortened since the
//     dead letter is seen this way. A record still there passes, whatever
//     the envelope says. (The check is made when the entry is decided: a
//     record that expires between the publish and the consumer's claim is
//     not seen.)
//     Without a Store (or for an entry with no operation key) the guard
//     takes the earliest moment the record can expire: the retention (the
//     envelope's surely_dedup_retention, else WithDefaultRetention) counted
//     from the earlier of the last failure (surely_last_failure_at) and the
//     dead letter. A conflict is refused outright: its record's last
//     write is unknown. An entry whose retention is unknown (neither is
//     set) is refused too.
//   - Resumable cursor: after each publish the entry is marked replayed
//     (archive.Archive.Mark) and the run saved (SaveReplay) with
//     After = the highest Seq up to which every entry was published or
//     refused: with Concurrency > 1 the cursor never passes an entry whose
//     publish has not finished. When ctx ends, in-flight publishes finish
//     and are recorded, and the run is saved "interrupted"; Resume
//     continues after the cursor and skips the entries this run already
//     marked (archive.Filter.NotReplayedBy), so an interrupted and resumed run
//     publishes every entry once. (A process killed between a publish and
//     its mark publishes that entry again on Resume: the dedup step acks
//     the duplicate.) A publish, mark or save error stops the run the same
//     way and is returned.
//   - Auto-abort: the run stops itself (ErrAborted, saved "aborted") after
//     WithAbortAfter consecutive re-failures (default 10; negative:
//     never).
//
// # Re-failures and "consecutive"
//
// Between publishes (every AbortAfter publishes, and at least once a
// second of the clock) the run looks at the outcomes of the messages it
// replayed. For each of the latest 4×max(AbortAfter, 10) replayed messages
// still open:
//
//   - a success is a dedup record (only with WithStore) that the replayed
//     operation completed (DONE, see "What resolved means");
//   - a re-failure is a dedup record that is EXHAUSTED and was reopened by
//     this run, or the message's dead letter in the archive. A replayed
//     message is dead-lettered under dlq's derived UUID: derived from its
//     UUID and this run's ID, so its re-failure is a new archive entry
//     carrying this run's surely_replay_id, never a copy of the entry it
//     replays.
//
// At most once a second, and when the run ends, it also lists the new
// archive entries carrying this run's surely_replay_id (archive.Filter.ReplayID),
// which catches the re-failures of messages no longer followed one by
// one. Each entry's re-failure is counted once.
//
// Re-failures are consecutive when no success was confirmed between them:
// each check adds its re-failures to the count, and a check that confirms
// any success first resets it to zero. Without a Store no success can be
// confirmed, so every re-failure of the call counts toward AbortAfter.
//
// # Lifecycle: resolved, failed again, canceled
//
// A replayed entry leaves the open state (archive.StateReplayed). With
// WithStore, each check that finds that a replayed message's operation
// completed (see "What resolved means") marks its entry resolved
// (archive.StateResolved) and counts it in the run's Resolved. A consumer usually processes the messages after
// the run ended: Reconcile, called later with the store, resolves the
// entries whose operation completed since, reading the records in one
// round trip per namespace when the store is an
// idempotency.RecordsReader. A replayed
// message that fails again is dead-lettered under a new ID, an open entry;
// the archive links the replayed entry to it (archive.Entry.FailedAgainAs).
//
// An operator cancels a run by saving it with State archive.RunCanceled
// (surely dlq runs cancel, the console's cancel): every save of a running
// call reads the run first, so the call stops before its next publish,
// stays canceled (also when its context ends at the same time: only a run
// that is done is saved done) and returns an error wrapping
// context.Canceled. Resume continues it.
//
// No save of a run overwrites what it did not read. A call's saves, the
// first one of Resume included, compare the saved run with the run as the
// call loaded or last wrote it: a cancel saved since (for Resume, while it
// counted the selection and the earlier re-failures) stops the call before
// any publish, and the entries Reconcile resolved since are added to the
// call's count. Reconcile adds its count to the run as saved when it
// saves, read again. The archive has no compare-and-swap, so what remains
// is the gap between one save's read and its write: a cancel saved
// exactly there is overwritten (cancel again).
//
// # What resolved means
//
// An entry is resolved when the replayed message ran and completed: its
// dedup record is DONE, with the entry's payload fingerprint
// (surely_fingerprint), and its completing attempt (the last of the
// record's history) began after the replay published the message. Any
// other DONE resolves nothing: for a conflict the record is the other
// payload's, completed before the replay (the replayed message is
// dead-lettered again as a conflict, without running), and a DONE begun
// before the publish was not the replay's doing. A record without
// history (a store that keeps none) proves nothing either: the entry
// stays replayed. A batch read (idempotency.RecordsReader) that returns a DONE record
// without fingerprint or history is followed by a Get of that record.
//
// The attempt's start is on the store's clock; the publish is dated by the
// run's clock (dlq.WithClock), and, for Reconcile, by the archive's
// clock when it marked the entry replayed, just after the publish. The
// clocks of different machines differ, so the attempt counts as begun
// after the publish when it began no earlier than one minute before it.
// Within that minute, a DONE of the same payload begun just before the
// publish (another delivery of the same operation) resolves the entry too:
// the operation did complete, with this payload. A store clock more than a
// minute behind leaves a completed replay unresolved (replayed, Pending in
// Reconcile): keep the clocks synchronised.
//
// # Progress and result
//
// WithProgress's callback is called after every decision with the entry, the
// action and reason, and the counters (Total for a bar). The Summary a
// call returns has the counts of the call, the saved state
// (archive.RunState) and cursor, and the achieved rate between the first
// and the last publish.
package replay
