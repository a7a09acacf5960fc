package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/opctx"
)

// errNoOperation is returned by an Inbox handler called without an
// operation in the message context, i.e. outside the dedup step.
var errNoOperation = errors.New("sqlstore: Inbox must run inside handler.New/middleware.Dedup with this store (no idempotency.Operation in the message context)")

// TxHandler is a business handler that does its effect inside tx. It must
// not Commit or Roll back tx (the inbox does), nor use any other connection
// for its effect. The messages it returns are kept in the DONE record, in
// the same transaction, and re-emitted for duplicates.
type TxHandler func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error)

// Inbox returns a message.HandlerFunc for handler.New or middleware.Dedup
// used with this store: fn's effect and the operation's DONE mark commit in
// one transaction, so a crash anywhere leaves both or neither.
//
//	h, err := handler.New(store.Inbox(pay),
//		handler.WithStore(store, "payments"),
//		handler.WithDeadLetter(pub, "payments.dead"))
//
// Where the claim goes depends on the delivery (see the package doc,
// "Transactional inbox", for the design and its crash analysis): the dedup
// step leaves it to the inbox once the inbox has accepted to claim in its
// transaction (its first call, when the dedup step uses this store). A
// first delivery from a broker that counts deliveries then claims, runs fn
// and marks the record DONE in one transaction; any other delivery commits
// its claim first and then runs fn in a transaction that begins with a
// fenced UPDATE marking the record DONE while it is still this attempt's
// (else ErrLeaseLost, and fn does not run). Without that offer (a
// process's first message, a wrapped store), the dedup step claims the
// operation first, in a transaction of its own, and the inbox:
//
//  1. reads the operation from msg.Context() (an error
//     without one);
//  2. begins a transaction (READ COMMITTED on PostgreSQL and MySQL);
//  3. marks the record DONE with one UPDATE fenced on the lease (IN_PROGRESS
//     under this attempt's token, not past its retention), which takes the
//     row lock (on SQLite, the database's write lock); when it matches no
//     row, rolls back and returns an error wrapping
//     idempotency.ErrLeaseLost: fn never runs for a stale owner;
//  4. runs fn(ctx, tx, msg) with ctx = msg.Context();
//  5. stores the produced messages, if any, in the record (the outcome
//     Complete would store), commits, and tells the dedup step so, which
//     then skips Complete.
//
// When fn fails or panics, or the commit fails, the transaction is rolled
// back (fn's effect with it) and the error returned (a panic goes on
// unwinding to the dedup step, which records it); the dedup step then
// releases the claim outside the transaction, as for any failed attempt.
//
// Concurrent deliveries of one key serialize on the row lock. A claim's
// INSERT waits for the row the transaction updated, and a claim that would
// take the operation over locks the row, so no claim can take it over
// while an owner's inbox transaction holds it, even when the owner's lease
// expired meanwhile
// (a long fn, an extension that could not get through): the claim waits
// (within the dedup step's store timeout, see the package doc) and then
// finds the record DONE (Completed) or, after a rollback, takes over a
// failed or expired attempt. The one stale owner the inbox must stop is one
// whose lease was taken over before its transaction locked the row, and
// step 3 stops it. The DONE record's times are those of step 3.
//
// A message without an operation key, processed under
// handler.ProcessWithoutDedup, has no record: fn then runs in a
// transaction of its own, committed when fn returns nil.
func (s *Store) Inbox(fn TxHandler) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if fn == nil {
			return nil, errors.New("sqlstore: Inbox was given a nil TxHandler")
		}
		op, ok := opctx.From(ctx)
		if !ok {
			return nil, errNoOperation
		}
		if op.Key == "" {
			return s.inboxWithoutRecord(ctx, fn, msg)
		}
		if s.inTxClaims && op.InTx != nil && op.InTx.Store() == idempotency.Store(s) {
			op.InTx.Accept() // the dedup step may leave its claims to us
		}
		if dc := op.Deferred; dc != nil {
			if op.InTx == nil || op.InTx.Store() != idempotency.Store(s) {
				return nil, fmt.Errorf("sqlstore: inbox %q: the dedup step left its claim to a handler of another store", op.Key)
			}
			return s.inboxDeferred(ctx, fn, msg, op, dc)
		}
		s.prepare(ctx, s.fq.complete.sql, s.fq.setOutcome.sql)
		tx, err := s.db.BeginTx(ctx, s.txOptions())
		if err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: begin: %w", op.Key, err)
		}
		// Rolls back on every path but a commit, a panic of fn included.
		defer func() { _ = tx.Rollback() }()

		// The fenced DONE mark first: it takes the row lock (on SQLite
		// the database's write lock) and stops a stale owner before fn.
		lease := idempotency.Lease{Namespace: op.Namespace, Key: op.Key, Token: op.Token}
		marked, err := s.completeIn(ctx, tx, lease, nil)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: mark done: %w", op.Key, err)
		}
		if !marked {
			return nil, fmt.Errorf("sqlstore: inbox %q (attempt %d): the record in %s is no longer this attempt's: %w",
				op.Key, op.Attempt, s.table, idempotency.ErrLeaseLost)
		}
		return s.effectThenCommit(ctx, tx, fn, msg, op)
	}
}

// inboxWithoutRecord runs fn in a transaction of its own, for a message
// processed without dedup.
func (s *Store) inboxWithoutRecord(ctx context.Context, fn TxHandler, msg *message.Message) ([]*message.Message, error) {
	tx, err := s.db.BeginTx(ctx, s.txOptions())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if s.q.lock != "" {
		// SQLite: take the write lock first, as for a record (no namespace
		// is empty, so no row matches), so that fn can read, then write.
		if _, err := s.exec(ctx, tx, s.q.lock, "", ""); err != nil {
			return nil, fmt.Errorf("sqlstore: inbox: lock: %w", err)
		}
	}
	msgs, err := fn(ctx, tx, msg)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlstore: inbox: commit: %w", err)
	}
	return msgs, nil
}

// storedMessages is the outcome form of produced messages, the same the
// dedup step stores with Complete.
func storedMessages(msgs []*message.Message) []idempotency.StoredMessage {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]idempotency.StoredMessage, len(msgs))
	for i, m := range msgs {
		out[i] = idempotency.StoredMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	return out
}
