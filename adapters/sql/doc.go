// Package sql is surely's adapter for PostgreSQL used as a message broker:
// a Watermill Subscriber and Publisher on watermill-sql (v4) tables, with
// safe defaults for at-least-once delivery, and the delivery facts surely's
// middleware uses.
//
//	err := sql.InitializeSchema(ctx, db, "orders")    // once, at start (or in your migrations)
//	pub, err := sql.NewPublisher(db, delivery.WithLogger(logger))
//	sub, err := sql.NewSubscriber(db, "billing", delivery.WithLogger(logger))
//	h, err := handler.New(charge, handler.WithStore(store, "billing"), handler.WithDeadLetter(pub, "billing_dead"), ...)
//	router.AddConsumerHandler("billing", "orders", sub, handler.NoPublish(h))
//
// Both sides are watermill-sql's, with its PostgreSQL log schema
// (DefaultPostgreSQLSchema) and offsets adapter: a topic is a table of
// messages that are never deleted, and each consumer group keeps its
// position in the topic's offsets table. The Subscriber wraps
// watermill-sql's subscriber to replace three of its behaviours (see
// below): its ack deadline, its handling of undecodable rows, and its
// shutdown. It needs PostgreSQL 13 or later (xid8).
//
// The constructors take the *sql.DB (and the Subscriber its consumer
// group) and, as delivery.Option values, the settings below (this
// package's WithPollInterval and WithBatchSize; delivery's WithAckWait,
// WithResendInterval, WithLogger and WithCloseTimeout). An option a
// constructor does not use is refused, not ignored.
//
// # Tables
//
// Nothing creates a table implicitly. InitializeSchema creates, unless they
// exist, "watermill_<topic>" and "watermill_offsets_<topic>" (watermill-sql's
// names and statements, so its own publishers and subscribers share them),
// in one transaction under watermill-sql's advisory lock, and never changes
// an existing table. Payloads are BYTEA: Watermill payloads are bytes, and
// watermill-sql's default JSON column refuses any other payload at publish
// time (and the dead letter of such a message could not be written). A
// table that already exists with a JSON payload works as before. Publish
// and Subscribe fail on a topic whose tables are missing; a topic names
// tables, so it has 1 to 45 bytes of letters, digits, '_', '-', '.', ':'
// and '$' (else ErrInvalidTopic): PostgreSQL would silently truncate a longer name,
// and two topics would share tables.
//
// # Subscriber defaults, and why
//
//   - A consumer group (an argument of NewSubscriber, required), on the log schema.
//     watermill-sql's queue schema has no groups, and with a batch of more
//     than one row it acks every row it read, including those not yet
//     handed out when the batch stops early: they are lost.
//   - Batch size 1 (WithBatchSize): each message is read, handed out and
//     acked in a transaction of its own, which commits the group's new
//     offset with the ack. A larger batch commits its acks together at its end: a crash
//     delivers the batch's acked messages again (surely's dedup acks them
//     without running), and the transaction stays open for the whole batch
//     (see Transactions). Measured on 2 cores, acking at once, one group:
//     about 560 messages/s with a batch size of 1, 3,900 with 10, 21,000 with 100.
//   - An ack wait of 30s (delivery.WithAckWait, at least 100ms), kept by the Subscriber and
//     extendable: watermill-sql's own deadline is a context timeout that cannot be pushed back, cancels
//     the handler, and then commits the consuming transaction without the
//     ack (with whatever the handler wrote into it). It is disabled; when
//     this Subscriber's deadline passes unextended, the consuming
//     transaction is rolled back, the handler's context cancelled, and the
//     subscription reads the message again (so may another consumer of the
//     group).
//   - A resend interval of 100ms (delivery.WithResendInterval, at least
//     1ms; watermill-sql: 1s):
//     a nacked message is handed out again after it, by the same subscription, inside the same
//     transaction. surely's chain has already waited (its backoff, or the
//     delay of an operation in progress elsewhere) before it nacks.
//   - A poll interval of 1s (WithPollInterval): an idle subscription
//     looks for new rows every second (the latency of a message published to an idle topic); a
//     failed query is retried after 1s.
//
// # Delivery facts in the message context
//
// No delivery.Info: watermill-sql keeps no delivery count, so
// delivery.InfoFrom finds nothing and surely relies on its store's durable
// attempt count, which counts every claim, crashes included. Every message
// carries a delivery.Control:
//
//   - NackAfter reports false: a nacked message comes back after the fixed
//     resend interval; surely's retry step waits itself before it nacks.
//   - Extend moves the delivery's deadline to the ack wait from now (it
//     fails once the deadline has passed). surely's
//     dedup step calls it with each extension of its store lease, so a
//     handler longer than the ack wait keeps its delivery (bounded by the
//     store lease's longest hold) instead of seeing it handed out again.
//
// The context also carries watermill-sql's consuming transaction
// (wmsql.TxFromContext), committed with the ack and rolled back when the
// delivery is given up. Do not write a handler's effects into it while
// surely's store is elsewhere (Redis, another database connection): the
// store can record the operation DONE and the transaction still roll back
// (its deadline passes, its commit fails), and the redelivery is then
// acked as a duplicate with the effect lost. Use sqlstore's inbox, whose
// own transaction commits the effect with the DONE record.
//
// The context derives from the values of the context given to Subscribe
// (the router's) but is not cancelled with it; it is cancelled when the
// delivery is given up.
//
// # Transactions and the connection pool
//
// A message in flight holds an open transaction, hence a connection of the
// *sql.DB's pool and the group's row in the offsets table (SELECT ... FOR
// UPDATE). So:
//
//   - a consumer group hands out one message at a time, in the order of
//     the transactions that published them; several subscribers of a group
//     (processes, for availability) take turns on the row, they do not
//     share the load. Use more topics (or another broker) for parallelism.
//   - every subscription needs a connection of its own while a message is
//     in flight: give the pool more connections than subscriptions, plus
//     what the handlers need (sqlstore on the same pool, for instance).
//   - watermill-sql reads only rows of transactions older than every
//     transaction still open in the database (its xid8 design: a
//     slow publisher is never skipped). The consuming transaction has a
//     transaction ID (its row lock), so while a handler runs, no
//     watermill-sql subscriber in the database, on any topic, sees rows
//     committed by transactions that began after it. A slow handler delays
//     every topic; the ack wait bounds that, surely's extension lengthens it
//     (up to the store lease's longest hold). Keep handlers short, or keep
//     slow consumers in another database.
//
// # Malformed rows
//
// A row whose metadata is not a JSON object of strings (written by another
// producer) never stops the subscription: watermill-sql would fail every
// query on it, forever, holding up every row after it. It is handed out as
// a message whose metadata has only delivery.KeyDecodeError (the error)
// and "surely_decode_headers" (the metadata column as it was, JSON),
// whose payload is the row's payload, and whose UUID is the row's (or "sql-<transaction
// id>-<offset>" when it has none). surely's chain dead-letters it with
// reason "decode" before looking for an operation key, and acks it after
// the dead letter was published.
//
// # Ownership and shutdown
//
// NewSubscriber, NewPublisher and InitializeSchema take the caller's
// *sql.DB (with the pgx or lib/pq driver) and never close it; close it
// after the subscribers and publishers. The Publisher inserts a Publish's
// messages in one statement (all or none) and creates no table; to publish
// inside your own transaction, use sqlstore's outbox.
//
// Subscriber.Close stops handing out messages, waits up to the close
// timeout (delivery.WithCloseTimeout, default 30s) for the messages in
// flight to be acked or nacked, lets their acks commit, then ends the subscriptions; a message still unacked goes back to
// the group (its transaction is rolled back). Closing the subscriber before
// the router lets in-flight handlers finish and ack; the router closes it
// again, harmlessly. When the context given to Subscribe ends instead, the
// subscription drains the same way, but the last ack may be lost to the
// rollback (its message is delivered again, and acked by surely's dedup).
package sql
