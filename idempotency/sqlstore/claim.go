package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/record"
)

// Claim implements idempotency.Store. A key without a row is claimed with
// one INSERT of the whole record, which reads the database clock itself.
// For a key with a row, one read of the committed row (and the clock),
// without a lock, answers a claim that changes nothing (a live lease, a
// retry-after delay, a DONE or EXHAUSTED record, a fingerprint conflict);
// any other is made in one transaction that locks the row, reads the
// database clock and applies the state machine (on SQLite it begins with
// the INSERT again, which takes the write lock).
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	if err := validate(req); err != nil {
		return idempotency.ClaimResult{}, err
	}
	res, _, err := s.claimCommitted(ctx, req, 0, false)
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("sqlstore: claim: %w", err)
	}
	return res, nil
}

// validate is req.Validate and the store's bound of the fingerprint.
func validate(req idempotency.ClaimRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if len(req.Fingerprint) > maxFingerprintLen {
		return fmt.Errorf("%w: fingerprint of %d bytes, the limit is %d",
			idempotency.ErrInvalidRequest, len(req.Fingerprint), maxFingerprintLen)
	}
	return nil
}

// refusal reads the committed record of req and the database clock in one
// statement, without a lock, in tx or on its own when tx is nil, and
// decides the claim on them: refused is true when the claim changes
// nothing (record.Claim writes no record: a live lease, a retry-after
// delay, a DONE or EXHAUSTED record, a fingerprint conflict), and res is
// then its answer. found is false when the key has no row.
//
// A refusal needs no lock: each of them holds at the clock reading only if
// it held when the row was read, so the answer is that of a claim made at
// that moment. A claim that writes (a takeover, an expired record, an
// EXHAUSTED mark) still goes through Store.claim, under the row lock, and
// decides again on what it finds there. So the losers of a race for a new
// key, once the winner's INSERT commits, read its row side by side instead
// of queueing for its lock one commit after another.
func (s *Store) refusal(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest) (res idempotency.ClaimResult, found, refused bool, err error) {
	var now int64
	r, err := scanRow(s.queryRow(ctx, tx, s.q.getRow, req.Namespace, req.Key), &now)
	if errors.Is(err, sql.ErrNoRows) {
		return res, false, false, nil
	}
	if err != nil {
		return res, false, false, fmt.Errorf("read: %w", err)
	}
	now += s.skew.Load()
	cur, err := r.record(req.Namespace, req.Key, now)
	if err != nil || cur == nil {
		// Past its retention: the claim overwrites it, under the lock.
		return res, true, false, err
	}
	req.Lease = record.RoundMs(req.Lease)
	res, next := record.Claim(cur, req, "", fromMs(now), record.RoundMs(s.retention))
	return res, true, next == nil, nil
}

// claim applies the state machine (record.Claim) to the record of req,
// which has a row, in tx: it locks the row, reads the database clock
// (after the lock, so that a wait for the lock does not shorten the
// lease), decides and writes the row back when the claim changed it.
// found is false when the row has gone (a Purge deleted it since an
// insert found it): nothing was written then.
//
// On SQLite tx must have begun with a write (it holds the write lock).
// It returns the record as written.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest) (idempotency.ClaimResult, row, bool, error) {
	token := newToken()
	r, now, found, err := s.lockRow(ctx, tx, req.Namespace, req.Key)
	if err != nil || !found {
		return idempotency.ClaimResult{}, row{}, false, err
	}
	// A row past its retention is no record: our own placeholder, or a
	// record that is forgotten (overwritten here).
	cur, err := r.record(req.Namespace, req.Key, now)
	if err != nil {
		return idempotency.ClaimResult{}, row{}, false, err
	}
	// The store counts in milliseconds: the lease and the retention round
	// up to whole ones.
	req.Lease = record.RoundMs(req.Lease)
	res, next := record.Claim(cur, req, token, fromMs(now), record.RoundMs(s.retention))
	if next == nil {
		return res, r, true, nil
	}
	if r, err = rowOf(next, now); err != nil {
		return idempotency.ClaimResult{}, row{}, false, err
	}
	if err := s.save(ctx, tx, req.Namespace, req.Key, r); err != nil {
		return idempotency.ClaimResult{}, row{}, false, err
	}
	return res, r, true, nil
}

// claimFast claims req with one statement when the key has no row: it
// inserts the record IN_PROGRESS. ok is false when a row exists: then
// Store.claim decides. prior, the deliveries the broker reports before
// this one, only makes the previous attempt's outcome unknown (it left no
// record); it is not charged, since a broker also counts the deliveries
// that were nacked without an attempt (in progress elsewhere, a paused
// consumer).
//
// With tx nil the statement commits on its own; otherwise it runs in tx.
func (s *Store) claimFast(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest, prior int, async bool) (res idempotency.ClaimResult, r row, ok bool, err error) {
	token := newToken()
	r = row{
		state: string(idempotency.StateInProgress), fingerprint: req.Fingerprint, token: token,
		attempts: 1, reopenedBy: req.Reopen,
		history: []histEntry{{Attempt: 1, Started: histMarker, Result: idempotency.ResultInProgress,
			TraceID: req.TraceID, SpanID: req.SpanID, Owner: req.Owner}},
	}
	h, err := histPieces(r.history)
	if err != nil || len(h) != 2 {
		return res, r, false, err
	}
	q := s.fq.claimNew
	if async {
		q = s.fq.claimNewAsync
	}
	args := q.argv(map[string]any{
		"ns": req.Namespace, "key": req.Key, "fp": req.Fingerprint, "token": token, "attempts": 1,
		"lease": ms(req.Lease), "expires": ms(req.Lease) + ms(s.retention), "h0": h[0], "h1": h[1],
		"reopen": req.Reopen, "skew": s.skew.Load(),
	})
	var until int64
	if s.fq.claimNewReturns {
		if err := s.queryRow(ctx, tx, q.sql, args...).Scan(&until); errors.Is(err, sql.ErrNoRows) {
			return res, r, false, nil
		} else if err != nil {
			return res, r, false, fmt.Errorf("insert: %w", err)
		}
	} else {
		result, err := s.exec(ctx, tx, q.sql, args...)
		if err != nil {
			return res, r, false, fmt.Errorf("insert: %w", err)
		}
		if until, err = insertedID(result); err != nil || until == 0 {
			return res, r, false, err
		}
	}
	r.leaseUntil = until
	r.history[0].Started = until - ms(req.Lease) // the statement's clock
	var prev idempotency.AttemptResult
	if prior > 0 {
		prev = idempotency.ResultUnknown
	}
	return idempotency.ClaimResult{
		Status: idempotency.Acquired,
		Lease: idempotency.Lease{
			Namespace: req.Namespace, Key: req.Key, Token: token, Attempt: 1, Until: fromMs(until),
		},
		Previous: prev,
	}, r, true, nil
}

// claimCommitted claims req and commits the claim: one statement for a key
// without a row; else, after the read of Store.refusal, which answers a
// claim that changes nothing, a transaction of Store.claim. It returns
// the record as written when Acquired.
func (s *Store) claimCommitted(ctx context.Context, req idempotency.ClaimRequest, prior int, async bool) (idempotency.ClaimResult, row, error) {
	if async {
		s.prepare(ctx, s.fq.claimNewAsync.sql)
	} else {
		s.prepare(ctx, s.fq.claimNew.sql)
	}
	for try := 0; try < 3; try++ {
		// A new key: one statement, committed on its own.
		if res, r, ok, err := s.claimFast(ctx, nil, req, prior, async); err != nil || ok {
			return res, r, err
		}
		// The key has a row: a claim that changes nothing is answered
		// from the committed row, without a lock or a transaction.
		s.prepare(ctx, s.q.getRow)
		res, found, refused, err := s.refusal(ctx, nil, req)
		if err != nil || refused {
			return res, row{}, err
		}
		if !found {
			continue // a Purge deleted the row since the insert found it
		}
		s.prepare(ctx, s.claimTexts()...)
		// The claim writes: under the row lock. SQLite: the insert goes
		// again into the transaction, as its first statement, which takes
		// the write lock (and claims the key if the row has gone meanwhile).
		var r row
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			if s.dialect == SQLite {
				var err error
				if res, r, found, err = s.claimFast(ctx, tx, req, prior, async); err != nil || found {
					return err
				}
			}
			var err error
			res, r, found, err = s.claim(ctx, tx, req)
			return err
		})
		if err != nil || found {
			return res, r, err
		}
		// The row vanished (a Purge) between the read and the lock: again.
	}
	return idempotency.ClaimResult{}, row{}, errors.New("the record's row vanished three times during the claim")
}

// claimTexts are the statements of Store.claim, the claim of a key with
// a row.
func (s *Store) claimTexts() []string {
	texts := []string{s.q.selectRow, s.q.save}
	if !s.q.selectNow {
		texts = append(texts, s.q.now)
	}
	return texts
}

// insertedID is what a MySQL claimNew or insertDone reports as its last
// insert ID: the value it wrapped in LAST_INSERT_ID(), a time after 1970
// when it inserted its row; 0 when the key had a row.
func insertedID(res sql.Result) (int64, error) {
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	return id, nil
}
