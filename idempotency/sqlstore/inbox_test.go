package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

const (
	inboxNS   = "payments"
	deadTopic = "dead"
)

// inboxEnv is a store, a business table for the effects and the fakes
// around handler.New, on one backend.
type inboxEnv struct {
	b       backend
	db      *sql.DB
	store   *sqlstore.Store
	counted *faults.Store // the store as handler.New sees it, counting calls
	dead    *faults.Publisher
	effects string // the business table: one row per effect
}

func setupInbox(t *testing.T, b backend) *inboxEnv {
	t.Helper()
	db := b.open(t)
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

// effect is the business effect: a row in the business table, written in tx.
func (e *inboxEnv) effect(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
	op, _ := idempotency.OperationFrom(ctx)
	_, err := tx.ExecContext(ctx, rebind(e.b.dialect, "INSERT INTO "+quote(e.b.dialect, e.effects)+
		" (op_key, payload, attempt) VALUES (?, ?, ?)"), op.Key, string(msg.Payload), op.Attempt)
	return err
}

// count returns how many effects of key are committed.
func (e *inboxEnv) count(t testing.TB, key string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRowContext(context.Background(), rebind(e.b.dialect, "SELECT COUNT(*) FROM "+
		quote(e.b.dialect, e.effects)+" WHERE op_key = ?"), key).Scan(&n))
	return n
}

func (e *inboxEnv) get(t testing.TB, key string) idempotency.Record {
	t.Helper()
	rec, err := e.store.Get(context.Background(), inboxNS, key)
	require.NoError(t, err)
	return rec
}

// chain is handler.New around the inbox, with a short lease and one
// attempt per delivery, so that every redelivery is a new durable attempt.
func (e *inboxEnv) chain(t testing.TB, fn sqlstore.TxHandler, opts ...handler.Option) message.HandlerFunc {
	t.Helper()
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 50*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	require.NoError(t, err)
	base := []handler.Option{
		handler.WithStore(e.counted, inboxNS),
		handler.WithDeadLetter(e.dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(time.Second),
	}
	h, err := handler.New(e.store.Inbox(fn), append(base, opts...)...)
	require.NoError(t, err)
	return h
}

// delivery builds one delivery of an operation: a fresh message UUID, as a
// broker redelivery would have.
func delivery(key, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	return msg
}

// operationMsg is a message whose context carries op, as the dedup step
// hands it to the inbox.
func operationMsg(ctx context.Context, op *opctx.Op, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.SetContext(opctx.With(ctx, op))
	return msg
}

func claim(t testing.TB, s *sqlstore.Store, key string, lease time.Duration) idempotency.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), idempotency.ClaimRequest{
		Namespace: inboxNS, Key: key, Fingerprint: "fp", Lease: lease, MaxAttempts: 5,
	})
	require.NoError(t, err)
	return res
}

func opOf(l idempotency.Lease) *opctx.Op {
	return &opctx.Op{Operation: idempotency.Operation{Namespace: l.Namespace, Key: l.Key, Fingerprint: "fp", Attempt: l.Attempt, Token: l.Token}}
}

// The effect and the DONE mark commit together, in the handler's
// transaction: neither is visible before the commit, both after; the
// dedup step's Complete is skipped; a duplicate re-emits the produced
// messages without running the handler.
func TestInboxEffectAndDoneCommitTogether(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		var calls atomic.Int32
		h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			require.NoError(t, e.effect(ctx, tx, msg))
			// Seen from outside the transaction: no effect, no DONE yet.
			require.Zero(t, e.count(t, "order-1"))
			require.Equal(t, idempotency.StateInProgress, e.get(t, "order-1").State)
			out := message.NewMessage(watermill.NewUUID(), []byte("charged"))
			out.Metadata.Set("kind", "charged")
			return []*message.Message{out}, nil
		})
		first, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.Len(t, first, 1)
		require.Equal(t, 1, e.count(t, "order-1"))
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 1, rec.Attempts)
		require.Equal(t, idempotency.ResultDone, rec.History[0].Result)
		require.False(t, rec.History[0].Ended.IsZero())
		require.Equal(t, &idempotency.Outcome{Messages: []idempotency.StoredMessage{
			{UUID: first[0].UUID, Metadata: map[string]string{"kind": "charged"}, Payload: []byte("charged")},
		}}, rec.Outcome)
		require.Zero(t, e.counted.Calls("Complete"), "the inbox committed DONE; Dedup skips Complete")
		require.Zero(t, e.counted.Calls("Release"))

		again, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err, "a duplicate is acked")
		require.EqualValues(t, 1, calls.Load(), "a duplicate does not run the handler")
		require.Len(t, again, 1)
		require.Equal(t, first[0].UUID, again[0].UUID, "a duplicate re-emits the same messages")
		require.Equal(t, first[0].Payload, again[0].Payload)
		require.Equal(t, 1, e.count(t, "order-1"))
	})
}

// A handler error rolls back the effect and leaves no DONE mark: the
// record is FAILED (released by the dedup step), and the redelivery runs
// the handler again, which then commits the effect once.
func TestInboxHandlerErrorRollsBack(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		var calls atomic.Int32
		h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			require.NoError(t, e.effect(ctx, tx, msg))
			if calls.Add(1) == 1 {
				return nil, errors.New("card gateway timeout")
			}
			return nil, nil
		})
		_, err := h(delivery("order-1", "pay 10"))
		require.ErrorContains(t, err, "card gateway timeout")
		require.Zero(t, e.count(t, "order-1"), "the effect was rolled back")
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateFailed, rec.State, "no DONE mark")
		require.Equal(t, idempotency.ResultFailed, rec.History[0].Result)
		require.Contains(t, rec.History[0].Error, "card gateway timeout")

		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err, "the redelivery is processed, not taken for a duplicate")
		require.EqualValues(t, 2, calls.Load())
		require.Equal(t, 1, e.count(t, "order-1"), "effect once")
		rec = e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 2, rec.Attempts)
	})
}

// A panic in the handler rolls the transaction back; the dedup step
// records the panic and the redelivery commits the effect once.
func TestInboxPanicRollsBack(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		var calls atomic.Int32
		h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			require.NoError(t, e.effect(ctx, tx, msg))
			if calls.Add(1) == 1 {
				panic("nil map in the pricing code")
			}
			return nil, nil
		})
		_, err := h(delivery("order-1", "pay 10"))
		var pe *middleware.PanicError
		require.ErrorAs(t, err, &pe)
		require.Zero(t, e.count(t, "order-1"), "the effect was rolled back")
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateFailed, rec.State)
		require.Equal(t, "panic", rec.History[0].Reason)
		require.NotEmpty(t, rec.History[0].Stack)

		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.Equal(t, 1, e.count(t, "order-1"))
		require.Equal(t, idempotency.StateDone, e.get(t, "order-1").State)
	})
}

// An owner whose lease expired and was taken over gets ErrLeaseLost before
// its handler runs: its effect never happens, and the new owner's record
// is untouched.
func TestInboxStaleOwnerLeaseLost(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		ctx := t.Context()
		stale := claim(t, e.store, "order-1", time.Minute).Lease
		sqlstore.AdvanceClock(e.store, 2*time.Minute)
		current := claim(t, e.store, "order-1", time.Minute)
		require.Equal(t, idempotency.Acquired, current.Status, "the expired lease was taken over")
		before := e.get(t, "order-1")

		var calls atomic.Int32
		inbox := e.store.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, e.effect(ctx, tx, msg)
		})
		staleOp := opOf(stale)
		_, err := inbox(operationMsg(ctx, staleOp, "pay 10"))
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		require.False(t, staleOp.Committed)
		require.Zero(t, calls.Load(), "the stale owner's handler does not run")
		require.Zero(t, e.count(t, "order-1"))
		require.Equal(t, before, e.get(t, "order-1"), "the new owner's record is untouched")

		currentOp := opOf(current.Lease)
		_, err = inbox(operationMsg(ctx, currentOp, "pay 10"))
		require.NoError(t, err)
		require.True(t, currentOp.Committed)
		require.Equal(t, 1, e.count(t, "order-1"))
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, idempotency.ResultUnknown, rec.History[0].Result)

		// A lease ends with its commit: running it again is refused too.
		_, err = inbox(operationMsg(ctx, opOf(current.Lease), "pay 10"))
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		require.Equal(t, 1, e.count(t, "order-1"))
	})
}

// While an owner's inbox transaction holds the row, no claim can take the
// operation over, even once the owner's lease has expired: the claim waits
// for the commit and then finds the operation completed.
func TestInboxHoldsOffTakeover(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		owner := claim(t, e.store, "order-1", time.Minute).Lease
		entered, release := make(chan struct{}), make(chan struct{})
		inbox := e.store.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if err := e.effect(ctx, tx, msg); err != nil {
				return nil, err
			}
			close(entered)
			<-release
			return nil, nil
		})
		inboxDone := make(chan error, 1)
		go func() {
			_, err := inbox(operationMsg(context.Background(), opOf(owner), "pay 10"))
			inboxDone <- err
		}()
		<-entered
		sqlstore.AdvanceClock(e.store, 2*time.Minute) // the owner's lease has expired by the clock
		claimed := make(chan idempotency.ClaimResult, 1)
		go func() { claimed <- claim(t, e.store, "order-1", time.Minute) }()
		select {
		case res := <-claimed:
			t.Fatalf("a claim got through while the inbox transaction held the row: %v", res.Status)
		case <-time.After(300 * time.Millisecond):
		}
		close(release)
		require.NoError(t, <-inboxDone)
		res := <-claimed
		require.Equal(t, idempotency.Completed, res.Status, "the waiting claim finds the committed operation")
		require.Equal(t, 1, e.count(t, "order-1"))
		require.Equal(t, 1, e.get(t, "order-1").Attempts)
	})
}

// Concurrent deliveries of one key through handler.New produce exactly
// one effect; the others are nacked while it runs and acked as duplicates
// after.
func TestInboxConcurrentDeliveries(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		e := setupInbox(t, b)
		var calls atomic.Int32
		h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			if err := e.effect(ctx, tx, msg); err != nil {
				return nil, err
			}
			time.Sleep(50 * time.Millisecond)
			return []*message.Message{message.NewMessage("produced-1", nil)}, nil
		})
		const n = 8
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, n)
			outs  = make([][]*message.Message, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				// Redeliver like a broker until acked.
				deadline := time.Now().Add(20 * time.Second)
				for {
					outs[i], errs[i] = h(delivery("order-1", "pay 10"))
					if errs[i] == nil || time.Now().After(deadline) {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i], "delivery %d", i)
			require.Len(t, outs[i], 1, "delivery %d", i)
			require.Equal(t, "produced-1", outs[i][0].UUID)
		}
		require.EqualValues(t, 1, calls.Load(), "one handler run")
		require.Equal(t, 1, e.count(t, "order-1"), "one effect")
		rec := e.get(t, "order-1")
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 1, rec.Attempts)
	})
}

// Outside the dedup step the inbox refuses to run: it has no record to
// commit with the effect.
func TestInboxWithoutOperation(t *testing.T) {
	s := newStore(t, openSQLite(t), sqlstore.SQLite)
	var calls atomic.Int32
	inbox := s.Inbox(func(context.Context, *sql.Tx, *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, nil
	})
	_, err := inbox(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, sqlstore.ErrNoOperation)
	require.Zero(t, calls.Load())

	_, err = s.Inbox(nil)(operationMsg(t.Context(), &opctx.Op{Operation: idempotency.Operation{Key: "k"}}, ""))
	require.Error(t, err)
}

// A message processed without dedup (no key, ProcessWithoutDedup) runs in
// a transaction of its own, committed when the handler returns nil.
func TestInboxWithoutKey(t *testing.T) {
	e := setupInbox(t, sqliteBackend)
	h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+quote(e.b.dialect, e.effects)+" (op_key, payload, attempt) VALUES ('', ?, 0)", string(msg.Payload))
		return nil, err
	}, handler.WithIdentity(mustExtractor(t), handler.ProcessWithoutDedup))
	_, err := h(message.NewMessage(watermill.NewUUID(), []byte("no key")))
	require.NoError(t, err)
	require.Equal(t, 1, e.count(t, ""))
}

func mustExtractor(t testing.TB) *idempotency.Extractor {
	t.Helper()
	ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	require.NoError(t, err)
	return ex
}
