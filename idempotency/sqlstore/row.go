package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/record"
)

// row is a record as stored.
type row struct {
	state       string
	fingerprint string
	token       string
	attempts    int
	canceled    int
	leaseUntil  int64
	expiresAt   int64
	updatedAt   int64
	outcome     []byte // JSON of idempotency.Outcome; nil unless done
	history     []histEntry
	reopenedBy  string
	budgetBase  int
	notBefore   int64 // a FAILED record's retry-after time; 0 if none
}

// histEntry is one attempt as stored in the history column (a JSON array,
// the same shape as redisstore's). Times are milliseconds of the database
// clock.
type histEntry = record.Entry[int64]

// scanRow reads the columns of a record (see the columns constant) after
// the leading dest values.
func scanRow(sc interface{ Scan(...any) error }, lead ...any) (row, error) {
	var (
		r       row
		history []byte
	)
	dest := append(lead, &r.state, &r.fingerprint, &r.token, &r.attempts, &r.canceled,
		&r.leaseUntil, &r.expiresAt, &r.updatedAt, &r.outcome, &history, &r.reopenedBy, &r.budgetBase, &r.notBefore)
	if err := sc.Scan(dest...); err != nil {
		return row{}, err
	}
	if len(history) > 0 {
		if err := json.Unmarshal(history, &r.history); err != nil {
			return row{}, fmt.Errorf("decode history: %w", err)
		}
	}
	return r, nil
}

// lockRow reads the record of (namespace, key) in tx, locks it until tx
// ends and reads the database clock after the lock, in Unix milliseconds
// (in the same statement on PostgreSQL and SQLite). found is false when
// there is no row. On SQLite, whose locks are the database's, tx must
// have begun with a write (it then holds the write lock).
func (s *Store) lockRow(ctx context.Context, tx *sql.Tx, namespace, key string) (r row, now int64, found bool, err error) {
	var lead []any
	if s.q.selectNow {
		lead = append(lead, &now)
	}
	r, err = scanRow(s.queryRow(ctx, tx, s.q.selectRow, namespace, key), lead...)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, 0, false, nil
	}
	if err != nil {
		return row{}, 0, false, fmt.Errorf("select: %w", err)
	}
	if !s.q.selectNow {
		now, err = s.now(ctx, tx)
		return r, now, err == nil, err
	}
	return r, now + s.skew.Load(), true, nil
}

// save writes every column of r.
func (s *Store) save(ctx context.Context, tx *sql.Tx, namespace, key string, r row) error {
	h := r.history
	if h == nil {
		h = []histEntry{}
	}
	history, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	var outcome any
	if r.outcome != nil {
		outcome = string(r.outcome)
	}
	if _, err := s.exec(ctx, tx, s.q.save, r.state, r.fingerprint, r.token, r.attempts, r.canceled,
		r.leaseUntil, r.expiresAt, r.updatedAt, outcome, string(history), r.reopenedBy, r.budgetBase, r.notBefore, namespace, key); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// newToken returns 16 random bytes in hex: a lease token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// ms rounds d up to whole milliseconds, the store's resolution.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func fromMs(v int64) time.Time { return record.FromMs(v) }

// record is the record r keeps for (namespace, key) at now, nil when r is
// past its retention (a record that reads as absent).
func (r row) record(namespace, key string, now int64) (*idempotency.Record, error) {
	if r.expiresAt <= now {
		return nil, nil
	}
	rec := &idempotency.Record{
		Namespace:   namespace,
		Key:         key,
		State:       idempotency.State(r.state),
		Fingerprint: r.fingerprint,
		Token:       r.token,
		Attempts:    r.attempts,
		Canceled:    r.canceled,
		LeaseUntil:  fromMs(r.leaseUntil),
		History:     record.Attempts(r.history),
		ExpiresAt:   fromMs(r.expiresAt),
		ReopenedBy:  r.reopenedBy,
		BudgetBase:  r.budgetBase,
		NotBefore:   fromMs(r.notBefore),
	}
	if rec.State == idempotency.StateDone {
		var err error
		if rec.Outcome, err = decodeOutcome(r.outcome); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// rowOf is the row of rec, written at now (record reversed).
func rowOf(rec *idempotency.Record, now int64) (row, error) {
	r := row{
		state:       string(rec.State),
		fingerprint: rec.Fingerprint,
		token:       rec.Token,
		attempts:    rec.Attempts,
		canceled:    rec.Canceled,
		leaseUntil:  record.Ms(rec.LeaseUntil),
		expiresAt:   record.Ms(rec.ExpiresAt),
		updatedAt:   now,
		history:     record.Entries(rec.History),
		reopenedBy:  rec.ReopenedBy,
		budgetBase:  rec.BudgetBase,
		notBefore:   record.Ms(rec.NotBefore),
	}
	if rec.Outcome != nil {
		out, err := json.Marshal(rec.Outcome)
		if err != nil {
			return row{}, fmt.Errorf("encode outcome: %w", err)
		}
		r.outcome = out
	}
	return r, nil
}

func decodeOutcome(b []byte) (*idempotency.Outcome, error) {
	o := &idempotency.Outcome{}
	if len(b) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(b, o); err != nil {
		return nil, fmt.Errorf("decode outcome: %w", err)
	}
	return o, nil
}

// Get implements idempotency.Store with one statement (no transaction).
// ExpiresAt is when the record's retention ends (it reads as absent from
// then on, until Purge deletes it).
func (s *Store) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, err
	}
	if idem.ValidateNamespace(namespace) != nil || idem.ValidateKey(key) != nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	s.prepare(ctx, s.q.getRow)
	var now int64
	r, err := scanRow(s.queryRow(ctx, nil, s.q.getRow, namespace, key), &now)
	if errors.Is(err, sql.ErrNoRows) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("sqlstore: get: %w", err)
	}
	rec, err := r.record(namespace, key, now+s.skew.Load())
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("sqlstore: get: %w", err)
	}
	if rec == nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	return *rec, nil
}
