// Package outbox is the transactional outbox of the sqlstore inbox, on
// PostgreSQL: events published into the transaction that changes the state,
// and a forwarder that moves them to the real broker afterwards. State that
// commits without its follow-up event, or an event about state that rolled
// back, cannot happen: the event commits with the state, and is published,
// at least once, as soon as a forwarder reaches the broker.
//
// It is built from Watermill's parts, not beside them: the events are rows
// of a watermill-sql (v4) table, written with its PostgreSQL schema adapter
// inside your *sql.Tx, in the envelope of Watermill's components/forwarder
// (which keeps the destination topic, UUID, metadata and payload), and
// forwarder.Forwarder reads them with watermill-sql's subscriber and
// publishes them to your broker.
//
//	ob, err := outbox.New(db) // the same *sql.DB as the sqlstore.Store
//	err = ob.Migrate(ctx)     // or create the tables in your migrations
//
//	charge := func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
//		if _, err := tx.ExecContext(ctx, `UPDATE orders SET paid = true WHERE id = $1`, id); err != nil {
//			return nil, err
//		}
//		evt := message.NewMessage(watermill.NewUUID(), payload)
//		return nil, ob.Publisher(tx).Publish("orders.paid", evt) // into tx; nil: nothing for the router
//	}
//	h, err := handler.New(store.Inbox(charge), handler.WithStore(store, "orders"), ...)
//
//	fwd, err := ob.Forwarder(kafkaPublisher, outbox.WithLogger(logger))
//	go func() { errc <- fwd.Run(ctx) }() // in one or more processes
//	defer fwd.Close()
//
// # Publishing into the transaction
//
// Publisher(tx) inserts the messages into the outbox table in tx, and
// nothing else: they become visible to the forwarder when tx commits and
// vanish with a rollback. Inside an inbox TxHandler, the business change,
// the events and the DONE mark of the operation therefore commit together
// or not at all: a handler that fails (or panics, or whose commit fails)
// after publishing leaves no event behind, and its redelivery publishes
// again into its own transaction.
//
// Return Publish's error from the handler. An error of the database (a
// missing table, a lost connection) also aborts the PostgreSQL transaction,
// so that even an ignored one cannot let the state commit without its event:
// the rest of the transaction, the inbox's DONE mark included, fails. An
// error found before any SQL runs (a nil message, an empty topic) leaves
// the transaction as it was.
//
// Return nil (or only the messages the router should publish) from the
// TxHandler: messages both published into the outbox and returned would be
// sent twice. A duplicate delivery of the operation then re-emits nothing,
// which is right: its events are already in the outbox.
//
// Publisher works in any transaction on the outbox's database, not only in
// the inbox: an HTTP handler or a cron job uses it the same way. It never
// commits, rolls back or closes tx.
//
// # Tables and Migrate
//
// New touches nothing. Migrate creates, unless they exist, the two tables of
// watermill-sql's PostgreSQL adapters, with exactly the statements those
// adapters generate (CREATE TABLE IF NOT EXISTS, in one transaction under an
// advisory lock):
//
//	surely_outbox          one row per event (WithTable sets the name)
//	  "offset"             BIGSERIAL
//	  uuid                 VARCHAR(36), the envelope's row ID (not the event's UUID)
//	  created_at           TIMESTAMP DEFAULT CURRENT_TIMESTAMP
//	  payload              JSON: the forwarder envelope (destination_topic, uuid,
//	                       metadata, payload base64)
//	  metadata             JSON
//	  transaction_id       xid8, pg_current_xact_id() of the publishing transaction
//	  PRIMARY KEY (transaction_id, "offset")
//	surely_outbox_offsets  the forwarders' position (table + "_offsets")
//	  consumer_group       VARCHAR(255) PRIMARY KEY ("surely_forwarder")
//	  offset_acked         BIGINT
//	  last_processed_transaction_id xid8
//
// It needs PostgreSQL 13 or later (xid8). Migrate is the only DDL of the
// package: watermill-sql's AutoInitializeSchema and InitializeSchema stay off,
// so that no CREATE TABLE ever runs inside your transaction or behind your
// back. Without the tables, Publish fails (and so does the transaction) and
// Forwarder.Run returns an error at once.
//
// Rows are never deleted by the forwarder: Purge deletes the rows that were
// forwarded (call it periodically), Pending counts those that were not (a
// measure of the forwarder's lag).
//
// # Forwarding: at least once, in order
//
// A Forwarder runs Watermill's forwarder.Forwarder: watermill-sql's
// subscriber reads a batch of rows in a REPEATABLE READ transaction that
// locks the offsets row (SELECT ... FOR UPDATE), hands the envelopes one at
// a time to the forwarder, which publishes each to its destination topic on
// your publisher, and commits the new offset after the batch. Every event
// arrives with the UUID, metadata and payload it was published with, so
// surely consumers downstream deduplicate it (the default key is the
// idempotency_key metadata, else the UUID).
//
// Delivery is at least once, never at most once:
//
//   - a failed publish is retried (WithRetryInterval, forever, logged as an
//     error): nothing is skipped. A destination that refuses an event for
//     good (an invalid topic, a message too large) therefore holds up every
//     event after it until someone intervenes: watch the logs and Pending.
//   - a forwarder that stops or crashes after publishing but before its
//     offset commits publishes the batch again after a restart; so does a
//     publish that succeeded although the publisher reported an error, and
//     one that outlasts the publish timeout (WithPublishTimeout). Duplicates
//     carry the same UUID.
//
// Events are forwarded one at a time, in the order of their transactions'
// IDs and, within a transaction, in the order published. PostgreSQL gives a
// transaction its ID at its first write or row lock (an inbox transaction
// gets it at once, when it locks its operation's record), not at commit. A
// row is read only once every transaction with a lower ID has ended, so a
// slow transaction never makes the forwarder skip a later one
// (watermill-sql's xid8 design). Hence:
//
//   - transactions that ran one after the other (the second began after the
//     first committed) keep their order;
//   - two transactions that overlapped come in the order of their IDs, which
//     is not their commit order when the first to get an ID waited for a
//     lock held by the other. Events about one entity that must be applied
//     in order should carry its version;
//   - any transaction left open on the server (with an ID) holds up the
//     events of every transaction that got its ID later, in every outbox.
//     A forwarder's own read transaction has an ID (its row lock): while
//     its publisher fails, it retries inside that transaction for up to the
//     publish timeout (WithPublishTimeout, 30 s by default) before it starts
//     over, and so pauses for as long every other outbox on the server, and
//     every watermill-sql PostgreSQL subscriber (measured: 29.5 s with the
//     defaults). Shorten the publish timeout where one destination's outage
//     must not delay the others.
//
// Several forwarders (one per process, for availability) may run on one
// outbox: they take turns on the offsets row, and only one forwards at a
// time. An idle forwarder polls every WithPollInterval; while rows are
// waiting, it reads batch after batch without pause.
//
// # The outbox, or the re-emitted outcome of the core
//
// Without the outbox, surely already survives a crash between commit and
// publish: the produced messages a handler returns are kept in its DONE
// record (in the same transaction, with the inbox), the router publishes
// them after the commit and acks the consumed message only after that
// publish succeeded; a crash, or a failed publish, in between leaves the
// consumed message unacked, its redelivery finds the operation completed,
// and the same messages (same UUIDs) are re-emitted and published. That is
// enough, and cheaper (no table, no forwarder, no added latency), when all
// of these hold:
//
//   - the events are the consequence of a consumed message, returned by the
//     handler and published by the router on its one publish topic;
//   - the consumed message is redelivered until it is acked, for as long as
//     the publish side can be down: no broker delivery limit (RabbitMQ
//     quorum queues' delivery-limit, SQS maxReceiveCount, JetStream
//     MaxDeliver), message TTL or stream retention can drop it first;
//   - the redelivery comes within the DONE record's retention
//     (idempotency.WithRetention): an outage of the publish side keeps the
//     consumed message unacked, and past the retention its redelivery runs
//     the handler again instead of re-emitting;
//   - the events need no order beyond what the router's publish gives
//     (messages processed concurrently publish in any order, and a re-emitted
//     event comes after later ones).
//
// Use the outbox when any of them fails:
//
//   - the state changes outside a message handler (an HTTP request, a
//     scheduled job): there is no message to redeliver, and the event must
//     leave with the commit;
//   - the consumed message can disappear before its events are out (the
//     limits above, a consumer that acks early): with the outbox it is acked
//     at the commit, and the events wait in your own database, under your
//     own retention, for as long as the broker is down;
//   - the events must keep the order of the transactions that produced them
//     (see the caveat on overlapping transactions above), or go to several
//     topics, or to another broker than the consumer's;
//   - the handler would otherwise publish by itself: publishing to a broker
//     inside the transaction sends events for state that may roll back, and
//     publishing after the commit can be lost to a crash.
//
// Both give at least once with stable UUIDs, so consumers must deduplicate
// either way (a surely consumer does).
//
// # Ownership
//
// The outbox never closes the *sql.DB, the transactions or the destination
// publisher it is given; the caller owns them. A Forwarder owns the
// goroutines and the watermill-sql subscriber it creates, and stops them on
// Close or when Run's context is done.
package outbox
