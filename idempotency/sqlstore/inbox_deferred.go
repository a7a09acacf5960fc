package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/opctx"
)

// inboxDeferred makes the claim the dedup step left to the inbox (dc) and
// runs fn: in one transaction with the claim unless dc.Durable, else after
// committing the claim on its own. See the package doc, "Transactional
// inbox".
func (s *Store) inboxDeferred(ctx context.Context, fn TxHandler, msg *message.Message, op *opctx.Op, dc *opctx.DeferredClaim) ([]*message.Message, error) {
	req := dc.Request
	if err := validate(req); err != nil {
		return nil, err
	}
	if dc.Durable {
		s.prepare(ctx, s.fq.fencedDone.sql, s.fq.setOutcome.sql) // and those of claimCommitted
		// A redelivery, or a broker without a delivery count: the attempt
		// is committed before the effect, so that a crash is counted. On
		// PostgreSQL that commit does not wait for the WAL flush.
		res, r, err := s.claimCommitted(ctx, req, dc.PriorDeliveries, true)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: claim: %w", req.Key, err)
		}
		dc.Made, dc.Result = true, res
		if res.Status != idempotency.Acquired {
			return nil, nil
		}
		op.Acquired(res)
		return s.inboxClaimed(ctx, fn, msg, op, r)
	}
	s.prepare(ctx, append(s.claimTexts(), s.q.getRow, s.fq.insertDone.sql, s.fq.complete.sql, s.fq.setOutcome.sql)...)
	return s.inboxOneTx(ctx, fn, msg, op, dc)
}

// inboxOneTx claims, runs fn and marks the record DONE in one transaction.
// For a key without a row that is BEGIN, one INSERT of the DONE record,
// fn's statements, COMMIT (and an UPDATE of the outcome when fn produced
// messages). When fn fails, the claim is rolled back with the effect; the
// inbox then claims again, committed, so that the dedup step can record
// the failure.
func (s *Store) inboxOneTx(ctx context.Context, fn TxHandler, msg *message.Message, op *opctx.Op, dc *opctx.DeferredClaim) (_ []*message.Message, err error) {
	req := dc.Request
	tx, err := s.db.BeginTx(ctx, s.txOptions())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox %q: begin: %w", req.Key, err)
	}
	committed, claimed := false, false
	// Runs on every path, a panic of fn included.
	defer func() {
		if committed {
			return
		}
		_ = tx.Rollback()
		if !claimed {
			return
		}
		// The claim went with the effect. Claim again, committed, for the
		// dedup step to record the failure on; if that fails, its Release
		// finds no lease (ErrLeaseLost) and the message is redelivered.
		res, _, cerr := s.claimCommitted(context.WithoutCancel(ctx), req, dc.PriorDeliveries, false)
		if cerr == nil {
			dc.Result = res
		}
	}()

	res, inserted, err := s.claimInTx(ctx, tx, req, dc.PriorDeliveries)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox %q: %w", req.Key, err)
	}
	dc.Made, dc.Result = true, res
	if res.Status != idempotency.Acquired {
		// No attempt: commit what the claim changed (an EXHAUSTED mark,
		// an expired lease's end) and let the dedup step act on res.
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: commit: %w", req.Key, err)
		}
		committed = true
		return nil, nil
	}
	claimed = true
	op.Acquired(res)

	msgs, err := fn(ctx, tx, msg)
	if err != nil {
		return nil, err
	}
	if err := s.markDone(ctx, tx, res.Lease, inserted, msgs); err != nil {
		return nil, fmt.Errorf("sqlstore: inbox %q: %w", req.Key, err)
	}
	if err := tx.Commit(); err != nil {
		// Unknown whether the commit happened: the claim made again (see
		// the deferred function) finds the record DONE or takes it.
		return nil, fmt.Errorf("sqlstore: inbox %q: commit: %w", req.Key, err)
	}
	committed = true
	op.Committed = true
	return msgs, nil
}

// claimInTx claims req in tx: for a key without a row, one INSERT of the
// record already DONE (inserted is true); else, after the read of
// Store.refusal (not on SQLite), which answers a claim that changes
// nothing, the general claim. prior is the broker's count of earlier
// deliveries (see claimFast).
func (s *Store) claimInTx(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest, prior int) (res idempotency.ClaimResult, inserted bool, err error) {
	token := newToken()
	const attempt = 1 // a first delivery, with no record: see claimFast
	h, err := histPieces([]histEntry{{Attempt: attempt, Started: histMarker, Ended: histMarker,
		Result: idempotency.ResultDone, TraceID: req.TraceID, SpanID: req.SpanID, Owner: req.Owner}})
	if err != nil {
		return res, false, err
	}
	for try := 0; try < 3; try++ {
		if inserted, err = s.insertDone(ctx, tx, req, token, h); err != nil {
			return res, false, err
		}
		if inserted {
			res = idempotency.ClaimResult{Status: idempotency.Acquired, Lease: idempotency.Lease{
				Namespace: req.Namespace, Key: req.Key, Token: token, Attempt: attempt,
			}}
			if prior > 0 {
				res.Previous = idempotency.ResultUnknown
			}
			return res, true, nil
		}
		// A row exists. A claim that changes nothing is answered from the
		// committed row (a READ COMMITTED read, which sees what committed
		// while the INSERT waited): on PostgreSQL without locking it, on
		// MySQL (whose INSERT locked it already) without a locking SELECT
		// and a read of the clock. SQLite's general claim is that read
		// already, under the write lock the INSERT took.
		var found bool
		if s.dialect != SQLite {
			var refused bool
			if res, found, refused, err = s.refusal(ctx, tx, req); err != nil {
				return res, false, fmt.Errorf("claim: %w", err)
			}
			if refused {
				return res, false, nil
			}
			if !found {
				continue // a Purge deleted the row since the insert found it
			}
		}
		// Else the general claim, in this transaction.
		if res, _, found, err = s.claim(ctx, tx, req); err != nil {
			return res, false, fmt.Errorf("claim: %w", err)
		}
		if found {
			return res, false, nil
		}
	}
	return res, false, errors.New("the record's row vanished three times during the claim")
}

// insertDone inserts the record of req DONE under token, with the history
// pieces h (histPieces), in tx; false when the key has a row.
func (s *Store) insertDone(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest, token string, h []string) (bool, error) {
	q := s.fq.insertDone
	result, err := s.exec(ctx, tx, q.sql, q.argv(map[string]any{
		"ns": req.Namespace, "key": req.Key, "fp": req.Fingerprint, "token": token, "attempts": 1,
		"retention": ms(s.retention), "h0": h[0], "h1": h[1], "h2": h[2], "skew": s.skew.Load(),
	})...)
	if err != nil {
		return false, fmt.Errorf("insert: %w", err)
	}
	var n int64
	if s.fq.claimNewReturns {
		n, err = result.RowsAffected()
	} else if n, err = insertedID(result); n > 0 {
		n = 1 // MySQL: the row's retention end
	}
	if err != nil {
		return false, fmt.Errorf("insert: %w", err)
	}
	return n == 1, nil
}

// markDone finishes the record of lease, claimed in tx, after its effect
// produced msgs: a record inserted DONE gets the outcome when there is
// one; a record the general claim took is marked DONE with it by the
// fenced statement of Complete, which reads the clock.
func (s *Store) markDone(ctx context.Context, tx *sql.Tx, lease idempotency.Lease, inserted bool, msgs []*message.Message) error {
	var out []byte
	if len(msgs) > 0 || !inserted {
		var err error
		if out, err = json.Marshal(idempotency.Outcome{Messages: storedMessages(msgs)}); err != nil {
			return fmt.Errorf("encode outcome: %w", err)
		}
	}
	if inserted {
		if out == nil {
			return nil
		}
		return s.setOutcome(ctx, tx, lease.Namespace, lease.Key, lease.Token, out)
	}
	// The record is this transaction's (locked by the claim).
	ok, err := s.completeIn(ctx, tx, lease, out)
	if err == nil && !ok {
		err = errors.New("the claimed record changed under its row lock")
	}
	if err != nil {
		return fmt.Errorf("mark done: %w", err)
	}
	return nil
}

// inboxClaimed runs fn after a committed claim whose record is r: BEGIN, a
// fenced UPDATE that marks the record DONE only while it is this
// attempt's (else ErrLeaseLost, and fn does not run), fn's statements,
// COMMIT. The UPDATE also takes the row lock (on SQLite the database's
// write lock) for the transaction.
func (s *Store) inboxClaimed(ctx context.Context, fn TxHandler, msg *message.Message, op *opctx.Op, r row) ([]*message.Message, error) {
	tx, err := s.db.BeginTx(ctx, s.txOptions())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox %q: begin: %w", op.Key, err)
	}
	// Rolls back on every path but a commit, a panic of fn included.
	defer func() { _ = tx.Rollback() }()

	hist := append([]histEntry(nil), r.history...)
	if n := len(hist); n > 0 {
		hist[n-1].Result, hist[n-1].Ended = idempotency.ResultDone, histMarker
	}
	h, err := histPieces(hist)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox %q: %w", op.Key, err)
	}
	if len(h) != 2 {
		return nil, fmt.Errorf("sqlstore: inbox %q: the history of %d entries does not end with the open attempt", op.Key, len(hist))
	}
	q := s.fq.fencedDone
	result, err := s.exec(ctx, tx, q.sql, q.argv(map[string]any{
		"ns": op.Namespace, "key": op.Key, "token": op.Token, "retention": ms(s.retention),
		"h0": h[0], "h1": h[1], "skew": s.skew.Load(),
	})...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox %q: mark done: %w", op.Key, err)
	}
	if n, err := result.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: mark done: %w", op.Key, err)
		}
		return nil, fmt.Errorf("sqlstore: inbox %q (attempt %d): the record in %s is no longer this attempt's: %w",
			op.Key, op.Attempt, s.table, idempotency.ErrLeaseLost)
	}
	return s.effectThenCommit(ctx, tx, fn, msg, op)
}

// effectThenCommit runs fn in tx, whose record is already marked DONE for
// op's attempt, stores the messages fn produced as the record's outcome,
// and commits: the effect and its DONE record commit together or not at
// all.
func (s *Store) effectThenCommit(ctx context.Context, tx *sql.Tx, fn TxHandler, msg *message.Message, op *opctx.Op) ([]*message.Message, error) {
	msgs, err := fn(ctx, tx, msg)
	if err != nil {
		return nil, err
	}
	if len(msgs) > 0 {
		out, err := json.Marshal(idempotency.Outcome{Messages: storedMessages(msgs)})
		if err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: encode outcome: %w", op.Key, err)
		}
		if err := s.setOutcome(ctx, tx, op.Namespace, op.Key, op.Token, out); err != nil {
			return nil, fmt.Errorf("sqlstore: inbox %q: %w", op.Key, err)
		}
	}
	if err := tx.Commit(); err != nil {
		// Unknown whether the commit happened (a lost reply): the dedup
		// step's Release then finds the record DONE (ErrLeaseLost) and the
		// redelivery a duplicate, or the record IN_PROGRESS and releases it.
		return nil, fmt.Errorf("sqlstore: inbox %q: commit: %w", op.Key, err)
	}
	op.Committed = true
	return msgs, nil
}

// setOutcome stores the outcome of a DONE record written in tx.
func (s *Store) setOutcome(ctx context.Context, tx *sql.Tx, namespace, key, token string, out []byte) error {
	q := s.fq.setOutcome
	result, err := s.exec(ctx, tx, q.sql, q.argv(map[string]any{"outcome": string(out), "ns": namespace, "key": key, "token": token})...)
	if err != nil {
		return fmt.Errorf("store the outcome: %w", err)
	}
	if n, err := result.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("store the outcome: %d rows, %w", n, err)
	}
	return nil
}
