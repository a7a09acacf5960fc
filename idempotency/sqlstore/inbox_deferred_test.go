package sqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/internal/sqlcount"
)

// deferredRun is what the inbox did with a claim the dedup step left to it.
type deferredRun struct {
	op    *opctx.Op
	dc    *opctx.DeferredClaim
	out   []*message.Message
	err   error
	calls int                       // how many times fn ran
	seen  idempotency.AttemptResult // op.Previous as fn saw it
}

// runDeferred hands s's inbox around fn a claim of key left to it, as the
// dedup step does (see middleware's runDeferred): committed first when
// durable, else in the inbox's one transaction, after prior deliveries.
func runDeferred(s *sqlstore.Store, fn sqlstore.TxHandler, key, fingerprint string, durable bool, prior int) deferredRun {
	req := idempotency.ClaimRequest{Namespace: inboxNS, Key: key, Fingerprint: fingerprint, Lease: time.Minute, MaxAttempts: 5}
	r := deferredRun{
		op: &opctx.Op{Operation: idempotency.Operation{Namespace: inboxNS, Key: key, Fingerprint: fingerprint},
			InTx: opctx.NewInTxClaims(s)},
		dc: &opctx.DeferredClaim{Request: req, Durable: durable, PriorDeliveries: prior},
	}
	r.op.Deferred = r.dc
	h := s.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		r.calls++
		if op, ok := idempotency.OperationFrom(ctx); ok {
			r.seen = op.Previous
		}
		return fn(ctx, tx, msg)
	})
	r.out, r.err = h(operationMsg(context.Background(), r.op, "pay 10"))
	return r
}

// A deferred claim takes fingerprints up to MaxFingerprintLen bytes, as
// Claim does, whichever way it is made.
func TestInboxDeferredFingerprintLimit(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		effect := func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			return nil, e.effect(ctx, tx, msg)
		}
		longest := strings.Repeat("f", sqlstore.MaxFingerprintLen)
		for _, durable := range []bool{false, true} {
			key := map[bool]string{false: "one-tx", true: "durable"}[durable]
			r := runDeferred(e.store, effect, key, longest+"f", durable, 0)
			require.ErrorIs(t, r.err, idempotency.ErrInvalidRequest, "durable %v", durable)
			require.Zero(t, r.calls)
			require.False(t, r.dc.Made)

			r = runDeferred(e.store, effect, key, longest, durable, 0)
			require.NoError(t, r.err, "durable %v", durable)
			require.Equal(t, 1, r.calls)
			require.Equal(t, idempotency.Acquired, r.dc.Result.Status)
			require.Equal(t, 1, e.count(t, key))
			rec := e.get(t, key)
			require.Equal(t, idempotency.StateDone, rec.State)
			require.Equal(t, longest, rec.Fingerprint)
		}
	})
}

// A claim in the inbox's one transaction that finds no record tells the
// handler the previous attempt's outcome is unknown exactly when the
// broker reports earlier deliveries (they may have run an effect whose
// record a crash took with it), and that it is the first otherwise.
func TestInboxOneTxPreviousAfterEarlierDeliveries(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		effect := func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			return nil, e.effect(ctx, tx, msg)
		}
		for prior, want := range map[int]idempotency.AttemptResult{
			0: idempotency.AttemptResult(""),
			1: idempotency.ResultUnknown,
			2: idempotency.ResultUnknown,
		} {
			key := "order-" + randomHex(4)
			r := runDeferred(e.store, effect, key, "fp", false, prior)
			require.NoError(t, r.err)
			require.True(t, r.dc.Made)
			require.Equal(t, idempotency.Acquired, r.dc.Result.Status)
			require.Equal(t, want, r.dc.Result.Previous, "%d prior deliveries", prior)
			require.Equal(t, want, r.seen, "%d prior deliveries: what the handler saw", prior)
			require.True(t, r.op.Committed)
			require.Equal(t, 1, e.count(t, key))
		}
	})
}

// A first delivery from a counting broker (one transaction) of a key
// already DONE is a duplicate: no error, no effect, the claim made with
// the Completed result for the dedup step to ack on.
func TestInboxOneTxDuplicateOfDoneRecord(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		res := claim(t, e.store, "order-1", time.Minute)
		require.NoError(t, e.store.Complete(t.Context(), res.Lease, idempotency.Outcome{}))

		r := runDeferred(e.store, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			return nil, e.effect(ctx, tx, msg)
		}, "order-1", "fp", false, 0)
		require.NoError(t, r.err)
		require.Empty(t, r.out)
		require.Zero(t, r.calls, "a duplicate does not run the handler")
		require.True(t, r.dc.Made)
		require.Equal(t, idempotency.Completed, r.dc.Result.Status)
		require.False(t, r.op.Committed)
		require.Zero(t, e.count(t, "order-1"))
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 1, rec.Attempts)
	})
}

// A first delivery from a counting broker (one transaction) of a key whose
// record failed before takes it over in that transaction: the effect and
// the DONE mark of attempt 2, with the produced messages, commit together.
func TestInboxOneTxTakesOverFailedRecord(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		res := claim(t, e.store, "order-1", time.Minute)
		require.NoError(t, e.store.Release(t.Context(), res.Lease, idempotency.Failure{Error: "card gateway timeout"}))

		r := runDeferred(e.store, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if err := e.effect(ctx, tx, msg); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("charged"))}, nil
		}, "order-1", "fp", false, 0)
		require.NoError(t, r.err)
		require.Len(t, r.out, 1)
		require.Equal(t, 1, r.calls)
		require.Equal(t, idempotency.Acquired, r.dc.Result.Status)
		require.Equal(t, 2, r.dc.Result.Lease.Attempt)
		require.Equal(t, idempotency.ResultFailed, r.seen)
		require.True(t, r.op.Committed)
		require.Equal(t, 1, e.count(t, "order-1"))
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 2, rec.Attempts)
		require.Equal(t, idempotency.ResultDone, rec.History[1].Result)
		require.NotNil(t, rec.Outcome)
		require.Len(t, rec.Outcome.Messages, 1)
		require.Equal(t, r.out[0].UUID, rec.Outcome.Messages[0].UUID)
	})
}

// The statements a delivery through the dedup step sends, one connection,
// warmed up: a new key's first delivery from a counting broker BEGIN, the
// INSERT of the DONE record, the effect, COMMIT; without a count the claim
// (its INSERT, committed), BEGIN, the fenced UPDATE that marks it DONE, the
// effect, COMMIT. The outcome is written (one UPDATE more) only when the
// handler produced messages.
func TestInboxStatementsPerDelivery(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		var c sqlcount.Counter
		db := countedDB(t, b, &c)
		db.SetMaxOpenConns(1)
		e := setupInboxOn(t, b, db)
		var produce atomic.Bool
		h := e.inTxChain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if err := e.effect(ctx, tx, msg); err != nil {
				return nil, err
			}
			if produce.Load() {
				return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("charged"))}, nil
			}
			return nil, nil
		})
		for _, d := range deliveries {
			for _, out := range []bool{false, true} {
				produce.Store(out)
				_, err := h(d.build("warm-"+randomHex(4), "pay 10")) // prepares the path's statements
				require.NoError(t, err)
				key := "order-" + randomHex(4)
				before := c.Snapshot()
				_, err = h(d.build(key, "pay 10"))
				require.NoError(t, err)
				got := c.Snapshot().Sub(before)
				want := map[string]sqlcount.Counts{
					"first_counted": {Begins: 1, Execs: 2, Commits: 1},
					"uncounted":     {Autocommits: 1, Begins: 1, Execs: 3, Commits: 1}, // the claim: a query on PostgreSQL and SQLite (RETURNING)
				}[d.name]
				if out {
					want.Execs++ // the outcome's UPDATE
				}
				require.Equal(t, want.Statements(), got.Statements(), "%s, messages %v: %+v", d.name, out, got)
				require.Equal(t, want.Begins, got.Begins, "%s, messages %v: %+v", d.name, out, got)
				require.Equal(t, want.Commits, got.Commits, "%s, messages %v: %+v", d.name, out, got)
				require.Equal(t, want.Autocommits, got.Autocommits, "%s, messages %v: %+v", d.name, out, got)
				require.Zero(t, got.Rollbacks, "%s, messages %v: %+v", d.name, out, got)
				require.Equal(t, 1, e.count(t, key))
			}
		}
	})
}

// setupInboxOn is setupInbox on db (a pool on b's database).
func setupInboxOn(t *testing.T, b backend, db *sql.DB) *inboxEnv {
	t.Helper()
	s := newStore(t, db, b.dialect, sqlstore.WithInTxClaims())
	e := &inboxEnv{b: b, db: db, store: s, counted: faults.NewStore(s), dead: faults.NewPublisher(0),
		effects: sqlstore.Table(s) + "_fx"}
	keyType := "TEXT"
	if b.dialect == sqlstore.MySQL {
		keyType = "VARCHAR(512)"
	}
	dropTable(t, db, b.dialect, e.effects)
	_, err := db.ExecContext(t.Context(), "CREATE TABLE "+quote(b.dialect, e.effects)+
		" (op_key "+keyType+" NOT NULL, payload "+keyType+" NOT NULL, attempt INTEGER NOT NULL)")
	require.NoError(t, err)
	return e
}
