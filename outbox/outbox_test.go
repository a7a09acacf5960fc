package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/testsql"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/outbox"
	"github.com/surely-dev/surely/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	namespace  = "orders"
	eventTopic = "orders.paid"
	// waitFor bounds every wait for the forwarder; it polls every tick.
	waitFor = 10 * time.Second
	tick    = 10 * time.Millisecond
)

// env is one test's world on the shared PostgreSQL server: an inbox store,
// an outbox and a business table, all on tables of its own, dropped at the
// end.
type env struct {
	db       *sql.DB
	store    *sqlstore.Store
	ob       *outbox.Outbox
	business string
	dead     *faults.Publisher

	mu     sync.Mutex
	events map[string]*message.Message // op key -> the event its handler published
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	db := testsql.Postgres(t)
	ctx := t.Context()
	e := &env{db: db, dead: faults.NewPublisher(0), events: map[string]*message.Message{}}

	inboxTable := randomName("surely_test_inbox_")
	dropTables(t, db, inboxTable)
	store, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(inboxTable))
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	e.store = store

	e.ob = newOutbox(t, db)
	require.NoError(t, e.ob.Migrate(ctx))
	require.NoError(t, e.ob.Migrate(ctx), "Migrate is idempotent")

	e.business = randomName("surely_test_orders_")
	dropTables(t, db, e.business)
	_, err = db.ExecContext(ctx, `CREATE TABLE "`+e.business+`" (op_key TEXT PRIMARY KEY, payload TEXT NOT NULL)`)
	require.NoError(t, err)
	return e
}

// newOutbox returns an outbox on a random table of the test's own (not
// migrated), whose tables are dropped at the end.
func newOutbox(t *testing.T, db *sql.DB) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(db, outbox.WithTable(randomName("surely_test_outbox_")))
	require.NoError(t, err)
	dropTables(t, db, ob.Table(), ob.OffsetsTable())
	return ob
}

// dropTables drops tables of the test's own when it ends.
func dropTables(t *testing.T, db *sql.DB, tables ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, table := range tables {
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+table+`"`); err != nil {
				t.Errorf("drop test table %s: %v", table, err)
			}
		}
	})
}

// chain is handler.New around the inbox, one attempt per delivery.
func (e *env) chain(t *testing.T, fn sqlstore.TxHandler) message.HandlerFunc {
	t.Helper()
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 50*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	require.NoError(t, err)
	h, err := handler.New(e.store.Inbox(fn),
		handler.WithStore(e.store, namespace),
		handler.WithDeadLetter(e.dead, "dead"),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(5*time.Second))
	require.NoError(t, err)
	return h
}

// pay is the business handler: a row in the business table and an event
// published into the same transaction; nothing returned to the router.
func (e *env) pay(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
	return nil, e.payWith(ctx, e.ob, tx, msg)
}

func (e *env) payWith(ctx context.Context, ob *outbox.Outbox, tx *sql.Tx, msg *message.Message) error {
	key := idempotency.KeyFrom(ctx)
	if _, err := tx.ExecContext(ctx, `INSERT INTO "`+e.business+`" (op_key, payload) VALUES ($1, $2)`, key, string(msg.Payload)); err != nil {
		return err
	}
	evt := message.NewMessage(watermill.NewUUID(), []byte(`{"paid":"`+key+`"}`))
	evt.Metadata.Set("order", key)
	evt.Metadata.Set(idempotency.DefaultMetadataKey, "paid-"+key)
	e.mu.Lock()
	e.events[key] = evt
	e.mu.Unlock()
	return ob.Publisher(tx).Publish(eventTopic, evt)
}

// event returns the event the handler of key published last.
func (e *env) event(t *testing.T, key string) *message.Message {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	evt, ok := e.events[key]
	require.True(t, ok, "no event published for %s", key)
	return evt
}

// delivery is one delivery of an operation, as a broker hands it over.
func delivery(key string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte("pay "+key))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	return msg
}

func (e *env) businessRows(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRowContext(context.Background(),
		`SELECT COUNT(*) FROM "`+e.business+`" WHERE op_key = $1`, key).Scan(&n))
	return n
}

// outboxRows counts every row of ob's table, forwarded or not.
func outboxRows(t *testing.T, db *sql.DB, ob *outbox.Outbox) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM "`+ob.Table()+`"`).Scan(&n))
	return n
}

func pending(t *testing.T, ob *outbox.Outbox) int64 {
	t.Helper()
	n, err := ob.Pending(context.Background())
	require.NoError(t, err)
	return n
}

// forward runs a forwarder of ob to pub until the test ends (or stop is
// called), with short intervals.
func forward(t *testing.T, ob *outbox.Outbox, pub message.Publisher, opts ...outbox.Option) (stop func()) {
	t.Helper()
	f, err := ob.Forwarder(pub, append([]outbox.Option{
		outbox.WithPollInterval(20 * time.Millisecond), outbox.WithRetryInterval(20 * time.Millisecond),
	}, opts...)...)
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- f.Run(context.Background()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			require.NoError(t, f.Close())
			require.NoError(t, <-ran)
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitEvents waits until pub has at least n events on eventTopic.
func waitEvents(t *testing.T, pub *faults.Publisher, n int) []*message.Message {
	t.Helper()
	require.Eventually(t, func() bool { return len(pub.Published(eventTopic)) >= n }, waitFor, tick,
		"waiting for %d forwarded events", n)
	return pub.Published(eventTopic)
}

// barrier commits one more operation and waits until its event is
// forwarded. Events are forwarded in transaction order, so every event that
// committed before the barrier has been forwarded by then.
func (e *env) barrier(t *testing.T, h message.HandlerFunc, pub *faults.Publisher) (key string) {
	t.Helper()
	key = randomName("barrier-")
	_, err := h(delivery(key))
	require.NoError(t, err)
	uuid := e.event(t, key).UUID
	require.Eventually(t, func() bool {
		for _, m := range pub.Published(eventTopic) {
			if m.UUID == uuid {
				return true
			}
		}
		return false
	}, waitFor, tick, "waiting for the barrier event")
	return key
}

func requireSameEvent(t *testing.T, want, got *message.Message) {
	t.Helper()
	require.Equal(t, want.UUID, got.UUID)
	require.Equal(t, want.Payload, got.Payload)
	require.Equal(t, want.Metadata, got.Metadata)
}

// (1) The business row, the event and the DONE mark commit together; the
// forwarder delivers the event with its UUID, payload and metadata. Before
// the commit nothing is visible; a duplicate delivery adds no event.
func TestCommittedEventIsForwarded(t *testing.T) {
	e := setup(t)
	pub := faults.NewPublisher(0)
	forward(t, e.ob, pub)

	h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		out, err := e.pay(ctx, tx, msg)
		require.NoError(t, err)
		if idempotency.KeyFrom(ctx) == "order-1" {
			require.Zero(t, pending(t, e.ob), "the event is invisible before the commit")
			require.Zero(t, outboxRows(t, e.db, e.ob))
		}
		return out, err
	})
	produced, err := h(delivery("order-1"))
	require.NoError(t, err)
	require.Empty(t, produced, "nothing for the router to publish")
	require.Equal(t, 1, e.businessRows(t, "order-1"))

	got := waitEvents(t, pub, 1)
	require.Len(t, got, 1)
	requireSameEvent(t, e.event(t, "order-1"), got[0])

	// A redelivery of the consumed message is a duplicate: no handler run,
	// nothing re-emitted, no second event.
	produced, err = h(delivery("order-1"))
	require.NoError(t, err)
	require.Empty(t, produced)
	e.barrier(t, h, pub)
	require.Len(t, pub.Published(eventTopic), 2, "order-1 once, and the barrier")
	require.Equal(t, 1, e.businessRows(t, "order-1"))
	require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
}

// (2) A handler that fails after publishing leaves no business row and no
// event: none is ever forwarded. The barrier proves the forwarder went past
// the point where the event would have been.
func TestRolledBackEventIsNeverForwarded(t *testing.T) {
	e := setup(t)
	pub := faults.NewPublisher(0)
	forward(t, e.ob, pub)
	ok := e.chain(t, e.pay)
	unmigrated := newOutbox(t, e.db) // its table does not exist

	for _, tc := range []struct {
		name    string
		handler sqlstore.TxHandler
		check   func(t *testing.T, err error)
	}{
		{"error", func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if _, err := e.pay(ctx, tx, msg); err != nil {
				return nil, err
			}
			return nil, errors.New("card declined")
		}, func(t *testing.T, err error) { require.ErrorContains(t, err, "card declined") }},
		{"panic", func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if _, err := e.pay(ctx, tx, msg); err != nil {
				return nil, err
			}
			panic("pricing bug")
		}, func(t *testing.T, err error) {
			var pe *middleware.PanicError
			require.ErrorAs(t, err, &pe)
		}},
		// The publish fails in the database and the handler ignores it: the
		// aborted transaction cannot commit the state without the event.
		{"ignored publish error", func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			perr := e.payWith(ctx, unmigrated, tx, msg)
			require.Error(t, perr)
			return nil, nil // ignores perr
		}, func(t *testing.T, err error) { require.Error(t, err) }},
	} {
		key := "order-" + tc.name
		_, err := e.chain(t, tc.handler)(delivery(key))
		tc.check(t, err)
		require.Zero(t, e.businessRows(t, key), "%s: the business row was rolled back", tc.name)
		require.Equal(t, idempotency.StateFailed, e.record(t, key).State, "%s: no DONE mark", tc.name)
	}
	require.Zero(t, outboxRows(t, e.db, e.ob), "no event reached the outbox")

	barrier := e.barrier(t, ok, pub)
	got := pub.Published(eventTopic)
	require.Len(t, got, 1, "only the barrier's event was forwarded")
	requireSameEvent(t, e.event(t, barrier), got[0])

	// The redelivery of a failed operation commits it, event included.
	_, err := ok(delivery("order-error"))
	require.NoError(t, err)
	got = waitEvents(t, pub, 2)
	requireSameEvent(t, e.event(t, "order-error"), got[1])
}

func (e *env) record(t *testing.T, key string) idempotency.Record {
	t.Helper()
	rec, err := e.store.Get(context.Background(), namespace, key)
	require.NoError(t, err)
	return rec
}

// lostReply publishes, then reports a failure for its first n calls, as a
// broker whose acknowledgement is lost: the event is forwarded again.
type lostReply struct {
	*faults.Publisher
	mu sync.Mutex
	n  int
}

func (p *lostReply) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n > 0 {
		p.n--
		return errors.New("broker reply lost")
	}
	return nil
}

// (3) The destination publisher fails: the event still arrives, later,
// possibly more than once, always with the same UUID. Nothing is lost or
// skipped.
func TestPublisherFailuresAreRetried(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		e := setup(t)
		pub := faults.NewPublisher(4) // the broker refuses the first 4 publishes
		forward(t, e.ob, pub)
		h := e.chain(t, e.pay)
		for _, key := range []string{"order-1", "order-2"} {
			_, err := h(delivery(key))
			require.NoError(t, err)
		}
		got := waitEvents(t, pub, 2)
		require.Len(t, got, 2)
		requireSameEvent(t, e.event(t, "order-1"), got[0])
		requireSameEvent(t, e.event(t, "order-2"), got[1])
		require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
	})
	t.Run("reply lost", func(t *testing.T) {
		e := setup(t)
		pub := &lostReply{Publisher: faults.NewPublisher(0), n: 2}
		forward(t, e.ob, pub)
		h := e.chain(t, e.pay)
		_, err := h(delivery("order-1"))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
		got := pub.Published(eventTopic)
		require.Len(t, got, 3, "published, reported failed twice: forwarded 3 times")
		for _, m := range got {
			requireSameEvent(t, e.event(t, "order-1"), m)
		}
	})
}

// A forwarder whose destination is down retries inside its read
// transaction, which pauses the forwarders of every other outbox on the
// server (they wait for older transactions); the publish timeout bounds the
// pause. The event of the failing outbox waits, it is not lost.
func TestFailingDestinationPausesOthersBriefly(t *testing.T) {
	t.Parallel()
	db := testsql.Postgres(t)
	ctx := t.Context()
	down, up := newOutbox(t, db), newOutbox(t, db)
	require.NoError(t, down.Migrate(ctx))
	require.NoError(t, up.Migrate(ctx))
	commit := func(ob *outbox.Outbox, uuid string) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, ob.Publisher(tx).Publish(eventTopic, message.NewMessage(uuid, nil)))
		require.NoError(t, tx.Commit())
	}

	forward(t, down, faults.NewPublisher(math.MaxInt), outbox.WithPublishTimeout(200*time.Millisecond))
	commit(down, "stuck")
	time.Sleep(100 * time.Millisecond) // its forwarder is retrying now

	pub := faults.NewPublisher(0)
	forward(t, up, pub)
	start := time.Now()
	commit(up, "other")
	got := waitEvents(t, pub, 1)
	require.Equal(t, "other", got[0].UUID)
	require.Less(t, time.Since(start), 5*time.Second, "paused for about the publish timeout, not the default 30 s")
	require.EqualValues(t, 1, pending(t, down), "the refused event waits")
}

// (4) A crash between COMMIT and forwarding: no forwarder runs when the
// transaction commits; the event waits in the table and the forwarder
// started later delivers it. A restarted forwarder resumes after what was
// forwarded.
func TestEventWaitsForForwarder(t *testing.T) {
	e := setup(t)
	h := e.chain(t, e.pay)
	_, err := h(delivery("order-1"))
	require.NoError(t, err)
	require.Equal(t, 1, e.businessRows(t, "order-1"))
	require.EqualValues(t, 1, pending(t, e.ob), "the event waits in the outbox")

	first := faults.NewPublisher(0)
	stop := forward(t, e.ob, first)
	got := waitEvents(t, first, 1)
	requireSameEvent(t, e.event(t, "order-1"), got[0])
	require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
	stop()

	_, err = h(delivery("order-2"))
	require.NoError(t, err)
	second := faults.NewPublisher(0)
	forward(t, e.ob, second)
	waitEvents(t, second, 1)
	require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
	got = second.Published(eventTopic)
	require.Len(t, got, 1, "order-1 was forwarded before the restart: not again")
	requireSameEvent(t, e.event(t, "order-2"), got[0])
}

// Events are forwarded in the order of their transactions, and of their
// Publish calls within one.
func TestForwardedInOrder(t *testing.T) {
	e := setup(t)
	pub := faults.NewPublisher(0)
	forward(t, e.ob, pub)
	var want []string
	h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		key := idempotency.KeyFrom(ctx)
		p := e.ob.Publisher(tx)
		for i := range 3 {
			m := message.NewMessage(fmt.Sprintf("%s-%d", key, i), nil)
			if err := p.Publish(eventTopic, m); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	for i := range 5 {
		key := fmt.Sprintf("order-%d", i)
		_, err := h(delivery(key))
		require.NoError(t, err)
		for j := range 3 {
			want = append(want, fmt.Sprintf("%s-%d", key, j))
		}
	}
	got := waitEvents(t, pub, len(want))
	uuids := make([]string, len(got))
	for i, m := range got {
		uuids[i] = m.UUID
	}
	require.Equal(t, want, uuids)
}

// Two forwarders on one outbox take turns: every event is forwarded, once.
func TestConcurrentForwarders(t *testing.T) {
	e := setup(t)
	pub := faults.NewPublisher(0)
	forward(t, e.ob, pub)
	forward(t, e.ob, pub)
	h := e.chain(t, e.pay)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := h(delivery(fmt.Sprintf("order-%d", i)))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
	got := pub.Published(eventTopic)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.UUID]++
	}
	for i := range n {
		key := fmt.Sprintf("order-%d", i)
		require.Equal(t, 1, seen[e.event(t, key).UUID], key)
	}
	require.Len(t, got, n)
}

// Purge deletes the forwarded rows and keeps the pending ones.
func TestPurge(t *testing.T) {
	e := setup(t)
	h := e.chain(t, e.pay)
	n, err := e.ob.Purge(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)

	_, err = h(delivery("order-1"))
	require.NoError(t, err)
	n, err = e.ob.Purge(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "nothing forwarded yet (no forwarder ever ran)")

	pub := faults.NewPublisher(0)
	stop := forward(t, e.ob, pub)
	waitEvents(t, pub, 1)
	require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
	stop()
	_, err = h(delivery("order-2"))
	require.NoError(t, err)

	n, err = e.ob.Purge(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 1, outboxRows(t, e.db, e.ob))
	require.EqualValues(t, 1, pending(t, e.ob), "order-2 stays")

	pub2 := faults.NewPublisher(0)
	forward(t, e.ob, pub2)
	got := waitEvents(t, pub2, 1)
	requireSameEvent(t, e.event(t, "order-2"), got[0])
}

// Publisher inserts only into its transaction, and refuses bad input.
func TestPublisher(t *testing.T) {
	e := setup(t)
	ctx := t.Context()

	tx, err := e.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	p := e.ob.Publisher(tx)
	require.NoError(t, p.Publish(eventTopic), "no message: no-op")
	require.ErrorContains(t, p.Publish("", message.NewMessage("a", nil)), "empty topic")
	require.ErrorContains(t, p.Publish(eventTopic, nil), "nil")
	require.NoError(t, p.Publish(eventTopic, message.NewMessage("a", nil), message.NewMessage("b", nil)))
	require.NoError(t, p.Close())
	require.Zero(t, pending(t, e.ob), "invisible before the commit")
	require.NoError(t, tx.Rollback())
	require.Zero(t, outboxRows(t, e.db, e.ob), "gone with the rollback")

	tx, err = e.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, e.ob.Publisher(tx).Publish(eventTopic, message.NewMessage("c", []byte("x"))))
	require.NoError(t, tx.Commit())
	require.EqualValues(t, 1, pending(t, e.ob))

	require.ErrorContains(t, e.ob.Publisher(nil).Publish(eventTopic, message.NewMessage("d", nil)), "nil *sql.Tx")
}

// Without its tables, an outbox's forwarder does not start, and a publish
// fails.
func TestWithoutMigrate(t *testing.T) {
	t.Parallel()
	db := testsql.Postgres(t)
	ob := newOutbox(t, db)
	f, err := ob.Forwarder(faults.NewPublisher(0))
	require.NoError(t, err)
	err = f.Run(t.Context())
	require.ErrorContains(t, err, "forwarder cannot read")
	require.NoError(t, f.Close())

	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	require.ErrorContains(t, ob.Publisher(tx).Publish(eventTopic, message.NewMessage("a", nil)), "does not exist")
}

// Close before Run stops the forwarder for good; Run on a running or
// closed forwarder fails; ctx ends Run.
func TestForwarderLifecycle(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	ob, err := outbox.New(db)
	require.NoError(t, err)

	f, err := ob.Forwarder(faults.NewPublisher(0))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "idempotent")
	require.ErrorIs(t, f.Run(t.Context()), outbox.ErrForwarderClosed)

	f, err = ob.Forwarder(faults.NewPublisher(0))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, f.Run(ctx), "a done ctx stops Run without an error")
	require.Error(t, f.Run(t.Context()), "Run once")
	require.NoError(t, f.Close())
}

// A forwarder whose ctx ends stops cleanly.
func TestForwarderStopsWithContext(t *testing.T) {
	e := setup(t)
	f, err := e.ob.Forwarder(faults.NewPublisher(0), outbox.WithPollInterval(20*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return after its ctx was done")
	}
	require.NoError(t, f.Close())
}

func TestOptions(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	defer func() { _ = db.Close() }()

	_, err = outbox.New(nil)
	require.ErrorIs(t, err, outbox.ErrInvalidOption)
	for _, name := range []string{"", "Outbox", "out-box", `o"x`, "1abc", "a234567890123456789012345678901234567890123456789"} {
		_, err = outbox.New(db, outbox.WithTable(name))
		require.ErrorIs(t, err, outbox.ErrInvalidOption, name)
	}
	_, err = outbox.New(db, nil)
	require.ErrorIs(t, err, outbox.ErrInvalidOption)

	ob, err := outbox.New(db)
	require.NoError(t, err)
	require.Equal(t, outbox.DefaultTable, ob.Table())
	require.Equal(t, "surely_outbox_offsets", ob.OffsetsTable())

	_, err = ob.Forwarder(nil)
	require.ErrorIs(t, err, outbox.ErrInvalidOption)
	for _, opt := range []outbox.Option{
		outbox.WithLogger(nil), outbox.WithPollInterval(0), outbox.WithRetryInterval(-time.Second),
		outbox.WithPublishTimeout(0), nil,
	} {
		_, err = ob.Forwarder(faults.NewPublisher(0), opt)
		require.ErrorIs(t, err, outbox.ErrInvalidOption)
	}

	// One option type configures both constructors; each refuses the
	// other's options instead of ignoring them.
	_, err = outbox.New(db, outbox.WithPollInterval(time.Second))
	require.ErrorIs(t, err, outbox.ErrInvalidOption)
	require.ErrorContains(t, err, "outbox.New does not take option WithPollInterval")
	_, err = ob.Forwarder(faults.NewPublisher(0), outbox.WithTable("other"))
	require.ErrorIs(t, err, outbox.ErrInvalidOption)
	require.ErrorContains(t, err, "Outbox.Forwarder does not take option WithTable")
}
