// Package archive keeps dead letters where an operator can list, query,
// replay and purge them (the surely CLI works on one).
//
// An Archive is a Watermill publisher: pass it to handler.WithDeadLetter
// and dead letters land in it directly, or run Ingest to move a broker's
// dead-letter topic into it (acking each message only after the archive
// stored it). Three implementations run the conformance suite
// dlq/archivetest: dlq/redisarchive (Redis, Sentinel, Cluster),
// dlq/sqlarchive (PostgreSQL, MySQL/MariaDB, SQLite) and dlq/memarchive
// (tests and examples only). Filter.Match is the reference of what a
// Filter selects. Nothing is evicted unless a retention is configured
// explicitly (dlq.WithRetention given to dlq/redisarchive or dlq/sqlarchive,
// applied by its Prune, which logs what it deleted). Package dlq/replay republishes
// archived entries with safety rails; its runs are kept in the archive
// (ReplayRun).
//
// An entry is a dead letter as package dlq wrote it: the archive reads the
// envelope's surely_* keys into the Entry's fields.
//
// An archive that can do more than Archive says so by implementing an
// optional interface declared here: ArrivalCounter (entries per
// dead-lettering-time bucket in one query, for the console's chart;
// dlq/sqlarchive implements it). Code that uses it checks with a type
// assertion, and dlq/archivetest runs its test when the archive has it.
//
// # Lifecycle
//
// Every entry has a State (see its doc): open when it arrives, replayed
// once a replay run republished it (Archive.Mark, by package dlq/replay),
// resolved when the replayed operation completed (its dedup record is
// DONE: dlq/replay confirms it during the run and in Reconcile), or
// discarded by an operator with a reason, kept as a tombstone. When the
// replayed message fails again, its dead letter is a new open entry
// (surely_replay_of names the old one) and the archive links the old entry
// to it (Entry.FailedAgainAs). The old entry is not reopened: the operation
// is open once, as the new entry, so the open count and a replay of the
// open entries never take a still-failing operation twice, and the chain
// of attempts stays readable from either end. Filter.States selects by state, Stats
// counts ByState, and RegisterMetrics reports the open entries only.
//
// # Metrics
//
// RegisterMetrics exports the backlog as two OTel gauges per original
// topic and reason (the attributes middleware.AttrTopic and
// middleware.AttrReason), read from Stats at most once per interval; its
// doc has Prometheus alert rules:
//
//	surely.dlq.archived    MetricArchived: the number of open dead letters
//	surely.dlq.oldest_age  MetricOldestAge: the age in seconds of the oldest of them
//
// Ingest and RegisterMetrics take the family's options (dlq.Option): the
// ones of this package (WithRetryDelay, WithMetricsInterval, ...) and
// dlq.WithLogger, dlq.WithClock; the archives take WithPrefix.
package archive
