package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/record"
)

// owns reports whether lease can name a record: an empty token, or a
// namespace or key that Claim would refuse, never matches one.
func owns(lease idempotency.Lease) bool {
	return lease.Token != "" && idem.ValidateNamespace(lease.Namespace) == nil &&
		idem.ValidateKey(lease.Key) == nil
}

// Complete implements idempotency.Store with one statement, committed on
// its own: an UPDATE fenced on the lease (this token, in progress, not
// past its retention) that reads the database clock itself.
//
// A Complete after the lease expired still succeeds while nobody else has
// claimed the key (the token is still current): the effect did commit.
//
// A Complete re-sent with the lease that completed the record (its commit
// went through but the reply was lost) succeeds and changes nothing; telling
// it apart from a lost lease costs one more statement, only then.
func (s *Store) Complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !owns(lease) {
		return idempotency.ErrLeaseLost
	}
	out, err := json.Marshal(outcome)
	if err != nil {
		return fmt.Errorf("sqlstore: encode outcome: %w", err)
	}
	s.prepare(ctx, s.fq.complete.sql)
	ok, err := s.completeIn(ctx, nil, lease, out)
	if err != nil {
		return fmt.Errorf("sqlstore: complete: %w", err)
	}
	if ok {
		return nil
	}
	// A DONE record never changes again: no race with this read.
	rec, gerr := s.Get(ctx, lease.Namespace, lease.Key)
	switch {
	case gerr == nil && rec.State == idempotency.StateDone && rec.Token == lease.Token:
		return nil
	case gerr != nil && !errors.Is(gerr, idempotency.ErrNotFound):
		return lostOr("complete", gerr)
	}
	return idempotency.ErrLeaseLost
}

// lostOr returns ErrLeaseLost as it is and wraps any other error.
func lostOr(op string, err error) error {
	if err == nil || errors.Is(err, idempotency.ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("sqlstore: %s: %w", op, err)
}

// Release implements idempotency.Store with one fenced statement, as
// Complete.
func (s *Store) Release(ctx context.Context, lease idempotency.Lease, f idempotency.Failure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !owns(lease) {
		return idempotency.ErrLeaseLost
	}
	state, result, canceled, delay := idempotency.StateFailed, idempotency.ResultFailed, 0, int64(0)
	switch {
	case f.Canceled:
		// Interrupted by shutdown: not charged to the budget, Final ignored.
		canceled, result = 1, idempotency.ResultCanceled
	case f.Final:
		state = idempotency.StateExhausted
	case f.RetryAfter > 0:
		delay = ms(f.RetryAfter)
	}
	c0, c1, err := closePieces(closedAttempt{
		Result: result,
		Error:  idem.Truncate(f.Error, defaults.MaxErrorLen),
		Type:   f.ErrorType, Reason: f.Reason,
		Stack: idem.Truncate(f.Stack, defaults.MaxStackLen),
	})
	if err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	s.prepare(ctx, s.fq.release.sql)
	ok, err := s.fenced(ctx, nil, s.fq.release, map[string]any{
		"state": string(state), "canceled": canceled, "delay": delay, "retention": ms(s.retention),
		"c0": c0, "c1": c1, "ns": lease.Namespace, "key": lease.Key, "token": lease.Token,
	})
	if err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	if !ok {
		return idempotency.ErrLeaseLost
	}
	return nil
}

// Extend implements idempotency.Store with one fenced statement, as
// Complete (on MySQL, and a read of the new expiry).
func (s *Store) Extend(ctx context.Context, lease idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lease, err
	}
	if err := record.CheckExtension(d); err != nil {
		return lease, err
	}
	if !owns(lease) {
		return lease, idempotency.ErrLeaseLost
	}
	s.prepare(ctx, s.fq.extend.sql, s.fq.extendCheck.sql)
	until, ok, err := s.extendLease(ctx, lease, d)
	if err != nil {
		return lease, fmt.Errorf("sqlstore: extend: %w", err)
	}
	if !ok {
		return lease, idempotency.ErrLeaseLost
	}
	lease.Until = fromMs(until)
	return lease, nil
}

// closedAttempt is the end of an attempt as the fenced statements write it
// into the open history entry, in place of its "result" member.
type closedAttempt struct {
	Result idempotency.AttemptResult `json:"result"`
	Ended  int64                     `json:"ended_ms"`
	Error  string                    `json:"error,omitempty"`
	Type   string                    `json:"type,omitempty"`
	Reason string                    `json:"reason,omitempty"`
	Stack  string                    `json:"stack,omitempty"`
}

// closePieces returns the members of c as JSON, without the braces, split
// where its end time goes: the c0 and c1 arguments of the fenced
// statements, between which they put their clock.
func closePieces(c closedAttempt) (c0, c1 string, err error) {
	c.Ended = histMarker
	b, err := json.Marshal(c)
	if err != nil {
		return "", "", fmt.Errorf("encode history: %w", err)
	}
	// The first occurrence is the end time: it comes before the strings,
	// which could hold the same digits.
	c0, c1, _ = strings.Cut(string(b[1:len(b)-1]), strconv.FormatInt(histMarker, 10))
	return c0, c1, nil
}

// fenced runs q, one of the fenced statements, on its own (its own
// commit), or in tx when tx is not nil, and reports whether it changed the
// record: false when the lease is no longer the record's current, open one.
// Each of them changes the state or the lease expiry of the row it
// matches (updated_at_ms too), so the count of changed rows is that of
// matched rows, whether or not the driver counts found rows (MySQL's
// clientFoundRows); Extend within the same millisecond is the exception,
// which extendLease reads back.
func (s *Store) fenced(ctx context.Context, tx *sql.Tx, q stmtText, v map[string]any) (bool, error) {
	v["skew"] = s.skew.Load()
	res, err := s.exec(ctx, tx, q.sql, q.argv(v)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// completeIn marks the record of lease DONE with outcome out (nil for
// none) with one fenced statement, on its own when tx is nil.
func (s *Store) completeIn(ctx context.Context, tx *sql.Tx, lease idempotency.Lease, out []byte) (bool, error) {
	c0, c1, err := closePieces(closedAttempt{Result: idempotency.ResultDone})
	if err != nil {
		return false, err
	}
	var outcome any
	if out != nil {
		outcome = string(out)
	}
	return s.fenced(ctx, tx, s.fq.complete, map[string]any{
		"outcome": outcome, "retention": ms(s.retention), "c0": c0, "c1": c1,
		"ns": lease.Namespace, "key": lease.Key, "token": lease.Token,
	})
}

// extendLease moves the lease expiry of lease to the database clock plus
// d with one fenced statement (on MySQL, and then a read of the expiry)
// and returns it; ok is false when the lease is lost.
func (s *Store) extendLease(ctx context.Context, lease idempotency.Lease, d time.Duration) (until int64, ok bool, err error) {
	q := s.fq.extend
	v := map[string]any{
		"ext": ms(d), "retention": ms(s.retention),
		"ns": lease.Namespace, "key": lease.Key, "token": lease.Token, "skew": s.skew.Load(),
	}
	if s.fq.extendReturns {
		err := s.queryRow(ctx, nil, q.sql, q.argv(v)...).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return until, err == nil, err
	}
	if _, err := s.exec(ctx, nil, q.sql, q.argv(v)...); err != nil {
		return 0, false, err
	}
	// MySQL counts a row set to the values it had (an extension within
	// the millisecond of the previous one) as unchanged: whether the
	// lease is still open tells instead. The extension made it open for
	// d plus the retention; had the update not matched, the record would
	// still be past its retention, or no longer this lease's.
	c := s.fq.extendCheck
	err = s.queryRow(ctx, nil, c.sql, c.argv(v)...).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return until, err == nil, err
}
