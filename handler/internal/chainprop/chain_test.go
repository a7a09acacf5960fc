package chainprop_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
	"pgregory.net/rapid"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// The property test of the whole chain: rapid draws a sequence of broker
// and world events (deliveries, broker duplicates, handler results, panics,
// retry.After, crashes that abandon a lease, lease expiry, replays of a
// dead letter, a conflicting payload, a failing dead-letter publisher, a
// shutdown during the handler) and drives handler.New's chain by calling
// its HandlerFunc directly, the way the router would. A reference model
// (what the broker holds, what was dead-lettered, the attempt numbers the
// handler saw) is checked after every step:
//
//   - nothing is acked (the chain returns nil) unless its operation is DONE
//     or the delivery published its dead letter;
//   - a delivery publishes at most one dead letter, and one that publishes
//     it is acked; a dead letter of a final failure leaves the record
//     EXHAUSTED (not claimable again without a replay);
//   - the attempt count of a record never decreases, and every handler run
//     sees a larger attempt number than the previous run of its key;
//   - every nack (the chain returns an error) is preceded by a delay of at
//     least propMinDelay asked of the broker (delivery.Control.NackAfter),
//     or, for retry.After(d), of at least d (all of it, even beyond the
//     in-process time), or, when another owner holds a live lease, of what
//     is left of it by the store's clock (at most
//     defaults.MaxInProgressWait): no delivery loop without a delay;
//   - the nack of a transient failure waits at least half the backoff's cap
//     for the record's attempt number (capped at the in-process time): the
//     delay grows across deliveries, whatever the jitter draws;
//   - a shutdown (the message context canceled while the handler runs)
//     nacks, publishes no dead letter and charges no attempt, even when the
//     handler's error is also marked permanent;
//   - the handler runs at most MaxAttempts times per key and budget, plus
//     the crashes, before the message is dead-lettered; a keyless message
//     (ProcessWithoutDedup) fails at most MaxAttempts times before its dead
//     letter (shutdowns aside), and one whose handler succeeded is acked.
//
//   - in inbox mode (sqlstore's Inbox on SQLite), at most one committed
//     effect per operation key.
//
// It runs on memstore (lease mode), whose clock is injected
// (idempotency.WithClock), starts skewed from the process clock by up to an
// hour either way and moves only when a step says so (lease expiry,
// retention expiry); on Redis (lease mode); and on SQLite (the inbox). On
// the servers time is real: a step that lets a lease expire waits out the
// 100ms lease. The broker supports native delays, so no other step sleeps.
// Run longer with -rapid.checks=N (default 100 sequences per store), e.g.
// go test ./handler/internal/chainprop -run TestPropertyChainMemstore -rapid.checks=100000.

const (
	propAttempts = 3
	propMinDelay = 10 * time.Millisecond
)

// propBackend is the store under test and how time passes for it.
type propBackend struct {
	store idempotency.Store
	ns    string
	// lease and maxInProc: the dedup lease and the policy's in-process time.
	lease, maxInProc time.Duration
	// now is the store's clock (approximately, for a server's).
	now func() time.Time
	// advance lets d pass on the store's clock.
	advance func(d time.Duration)
	// expire forgets every record (retention); nil when the store cannot.
	expire func()
	// inbox is the SQLite database of sqlstore's transactional inbox: the
	// handler's effect is a row in prop_effects, committed with DONE.
	inbox      *sql.DB
	inboxStore *sqlstore.Store
}

// memBackend is a memstore whose clock starts skewed from the process
// clock by up to an hour either way and moves only when told.
func memBackend(t *rapid.T) propBackend {
	skew := time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "skew"))
	clk := &propClock{now: time.Now().Add(skew)}
	st, err := memstore.New(idempotency.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return propBackend{
		store: st, ns: "prop", lease: 30 * time.Second, maxInProc: 10 * time.Second,
		now: clk.Now, advance: clk.advance,
		expire: func() { clk.advance(defaults.Retention + time.Hour) },
	}
}

// realAdvance waits out d on a server's clock, bounded by two leases.
func realAdvance(lease time.Duration) func(time.Duration) {
	return func(d time.Duration) {
		if d >= lease {
			time.Sleep(lease + 20*time.Millisecond) // the lease is the condition: it must pass
		}
	}
}

// propControl is the broker's delivery control: it records the delays
// asked for, and always supports them (a broker-native delay).
type propControl struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (c *propControl) NackAfter(d time.Duration) bool {
	c.mu.Lock()
	c.delays = append(c.delays, d)
	c.mu.Unlock()
	return true
}

func (c *propControl) Extend(context.Context) error { return nil }

// propDLQ is the dead-letter topic; it fails while failing is set.
type propDLQ struct {
	mu      sync.Mutex
	failing bool
	msgs    []*message.Message
}

func (p *propDLQ) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing {
		return errors.New("dead-letter broker down")
	}
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *propDLQ) Close() error { return nil }

func (p *propDLQ) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// propClock is the store's clock.
type propClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *propClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *propClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// propMsg is a message the broker holds until it is acked.
type propMsg struct {
	uuid    string
	key     string
	payload string
	replay  string
	acked   bool
	dead    bool // its dead letter was published
}

func (m *propMsg) message() *message.Message {
	msg := message.NewMessage(m.uuid, []byte(m.payload))
	if m.key != "" {
		msg.Metadata.Set(idempotency.DefaultMetadataKey, m.key)
	}
	if m.replay != "" {
		msg.Metadata.Set(dlq.KeyReplayID, m.replay)
	}
	return msg
}

// Handler results a step may draw.
const (
	resSuccess = iota
	resTransient
	resPermanent
	resPanic
	resAfter
	resFinal    // the handler returns a *dlq.FinalError
	resShutdown // the message context is canceled while the handler runs; it returns a permanent error
	resCount
)

// propWorld is one sequence's store, chain and reference model.
type propWorld struct {
	t        *rapid.T
	store    idempotency.Store
	b        propBackend
	dead     *propDLQ
	chain    message.HandlerFunc
	ex       *idempotency.Extractor
	msgs     []*propMsg
	seq      int
	replays  int
	attempts map[string]int // the record's attempt count last seen, per key
	seen     map[string]int // the last attempt number the handler saw, per key
	runs     map[string]int // handler runs per key since the last reset of its budget
	crashes  map[string]int // abandoned leases and canceled attempts per key since then

	// the current delivery's drawn behaviour
	missing   handler.MissingKeyPolicy
	keyless   map[string]int  // failed handler runs of keyless messages since their last success or dead letter, per UUID
	succeeded map[string]bool // the handler returned nil for the current delivery (per UUID)
	everOK    map[string]bool // the handler returned nil for a delivery of this keyless UUID
	result    int
	after     time.Duration
	jitter    float64
	permanent bool // a shutdown's error is also marked permanent
	cancel    context.CancelFunc
	ran       int  // the attempt number the handler saw in the current delivery (keyed), 0 if it did not run
	shutdown  bool // the handler ran and the message context was canceled during it
}

func newPropWorld(t *rapid.T, b propBackend) *propWorld {
	missing := rapid.SampledFrom([]handler.MissingKeyPolicy{handler.RejectMissingKey, handler.ProcessWithoutDedup}).Draw(t, "missing key")
	w := &propWorld{missing: missing, keyless: map[string]int{}, succeeded: map[string]bool{}, everOK: map[string]bool{},
		t: t, store: b.store, b: b, dead: &propDLQ{},
		attempts: map[string]int{}, seen: map[string]int{}, runs: map[string]int{}, crashes: map[string]int{},
	}
	var err error
	// Keys come from the metadata only: a message without one is keyless.
	w.ex, err = idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(propAttempts), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*propMinDelay, time.Second), retry.WithMaxInProcessTime(b.maxInProc),
		retry.WithRand(func() float64 { return w.jitter }))
	if err != nil {
		t.Fatal(err)
	}
	fn := w.business
	if b.inbox != nil {
		fn = b.inboxStore.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO prop_effects (k, uuid) VALUES (?, ?)", msg.Metadata.Get(idempotency.DefaultMetadataKey), msg.UUID); err != nil {
				return nil, err
			}
			return w.business(msg) // a failure rolls the effect back
		})
	}
	w.chain, err = handler.New(fn,
		handler.WithStore(b.store, b.ns), handler.WithDeadLetter(w.dead, "dead"),
		handler.WithPolicy(policy), handler.WithBreaker(nil), handler.WithLease(b.lease),
		handler.WithIdentity(w.ex, w.missing))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// business is the user's handler: it does what the step drew.
func (w *propWorld) business(msg *message.Message) ([]*message.Message, error) {
	op, ok := idempotency.OperationFrom(msg.Context())
	if !ok || op.Key == "" { // a keyless message, processed without dedup
		if w.result == resSuccess {
			w.succeeded[msg.UUID], w.everOK[msg.UUID] = true, true
			delete(w.keyless, msg.UUID) // what follows a success is not bounded by its budget
			return nil, nil
		}
		// Without an operation record the budget is counted per message
		// (its UUID); failures must end in a dead letter within it. Only
		// what is stable is modelled: how a success or a dead letter
		// resets the count is not (a later delivery starts afresh).
		if w.result != resShutdown { // a shutdown is not charged
			w.keyless[msg.UUID]++
		}
		if w.keyless[msg.UUID] > propAttempts {
			w.t.Errorf("keyless %s: the handler failed %d times, budget %d", msg.UUID, w.keyless[msg.UUID], propAttempts)
		}
		return w.outcome(msg)
	}
	if op.Attempt <= w.seen[op.Key] {
		w.t.Errorf("key %s: the handler saw attempt %d after attempt %d", op.Key, op.Attempt, w.seen[op.Key])
	}
	w.seen[op.Key] = op.Attempt
	w.ran = op.Attempt
	w.runs[op.Key]++
	if limit := propAttempts + w.crashes[op.Key]; w.runs[op.Key] > limit {
		w.t.Errorf("key %s: the handler ran %d times in one budget of %d attempts (with %d crashes)",
			op.Key, w.runs[op.Key], propAttempts, w.crashes[op.Key])
	}
	return w.outcome(msg)
}

// outcome ends a handler run as the step drew.
func (w *propWorld) outcome(msg *message.Message) ([]*message.Message, error) {
	switch w.result {
	case resSuccess:
		return nil, nil
	case resTransient:
		return nil, errors.New("transient")
	case resPermanent:
		return nil, retry.Permanent(errors.New("permanent"))
	case resPanic:
		panic("handler panic")
	case resAfter:
		return nil, retry.After(w.after, errors.New("rate limited"))
	case resFinal:
		return nil, dlq.Final(dlq.ReasonPermanent, errors.New("final"))
	case resShutdown:
		w.shutdown = true
		w.cancel()
		// The handler learns of the shutdown through its context, as one
		// whose dependency call returns on Done would: once something
		// waited on the attempt's context (the inbox's BeginTx does), its
		// cancellation follows the message context's in a goroutine
		// (context.AfterFunc), so Err alone may still be nil here.
		select {
		case <-msg.Context().Done():
		case <-time.After(5 * time.Second):
			w.t.Fatalf("%s: the attempt's context was not canceled with the message context", msg.UUID)
		}
		if op, ok := idempotency.OperationFrom(msg.Context()); ok && op.Key != "" {
			w.crashes[op.Key]++ // refunded: not charged to the budget
		}
		err := fmt.Errorf("during shutdown: %w", msg.Context().Err())
		if w.permanent {
			err = retry.Permanent(err)
		}
		return nil, err
	}
	return nil, fmt.Errorf("unknown result %d", w.result)
}

func (w *propWorld) record(key string) (idempotency.Record, bool) {
	if key == "" {
		return idempotency.Record{}, false
	}
	r, err := w.store.Get(context.Background(), w.b.ns, key)
	if errors.Is(err, idempotency.ErrNotFound) {
		return r, false
	}
	if err != nil {
		w.t.Fatalf("get %s: %v", key, err)
	}
	return r, true
}

// noteReopen forgets the runs counted against the budget of m's key when
// m, a replayed message, is about to reopen its record (once per run).
func (w *propWorld) noteReopen(m *propMsg) {
	r, ok := w.record(m.key)
	if !ok || m.replay == "" || r.ReopenedBy == m.replay || r.Fingerprint != w.fingerprint(m) {
		return
	}
	expired := r.State == idempotency.StateInProgress && !w.b.now().Before(r.LeaseUntil)
	if r.State == idempotency.StateExhausted || r.State == idempotency.StateFailed || expired {
		w.runs[m.key], w.crashes[m.key] = 0, 0
	}
}

// deliver hands message m to the chain, as the router would.
func (w *propWorld) deliver(m *propMsg) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.cancel = cancel
	ctl := &propControl{}
	msg := m.message()
	msg.SetContext(surelydelivery.WithControl(ctx, ctl))
	before := w.dead.count()
	w.noteReopen(m)
	w.ran, w.shutdown = 0, false

	_, err := w.chain(msg)

	published := w.dead.count() - before
	if w.shutdown && (err == nil || published != 0) {
		w.t.Fatalf("%s: a shutdown during the handler (permanent %v) was acked or dead-lettered (err %v, %d dead letters)",
			m.uuid, w.permanent, err, published)
	}
	if m.key == "" && w.succeeded[m.uuid] && err != nil {
		w.t.Fatalf("keyless %s: the handler succeeded, but the delivery was nacked (%v)", m.uuid, err)
	}
	if m.key == "" && published == 1 {
		delete(w.keyless, m.uuid) // its budget ended in a dead letter
	}
	rec, found := w.record(m.key)
	if published > 1 {
		w.t.Fatalf("one delivery of %s published %d dead letters", m.uuid, published)
	}
	if err == nil {
		switch {
		case published == 1:
			m.dead = true
		case found && rec.State == idempotency.StateDone:
		case m.key == "" && w.everOK[m.uuid]: // processed without dedup (now or before: a duplicate)
		default:
			w.t.Fatalf("%s acked, but its record is %v (found %v) and no dead letter was published", m.uuid, rec.State, found)
		}
		m.acked = true
	} else {
		if published == 1 {
			w.t.Fatalf("%s dead-lettered but nacked (%v)", m.uuid, err)
		}
		if ctx.Err() == nil { // a shutdown's nack needs no delay: the consumer stops
			w.checkDelay(m, ctl, err)
		}
	}
	delete(w.succeeded, m.uuid)
	if published == 1 && found && rec.Fingerprint == w.fingerprint(m) && rec.State != idempotency.StateExhausted {
		w.t.Fatalf("%s dead-lettered, but its record is %v, not exhausted: it could run again", m.uuid, rec.State)
	}
	if w.b.inbox != nil && m.key != "" { // keyless effects are not deduplicated
		var n int
		if err := w.b.inbox.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM prop_effects WHERE k = ?", m.key).Scan(&n); err != nil {
			w.t.Fatal(err)
		}
		if n > 1 {
			w.t.Fatalf("key %s: %d committed effects in inbox mode", m.key, n)
		}
	}
	if found {
		if rec.Attempts < w.attempts[m.key] {
			w.t.Fatalf("key %s: attempts went down from %d to %d", m.key, w.attempts[m.key], rec.Attempts)
		}
		w.attempts[m.key] = rec.Attempts
	}
}

func (w *propWorld) fingerprint(m *propMsg) string {
	id, err := w.ex.Extract(m.message())
	if err != nil {
		w.t.Fatal(err)
	}
	return id.Fingerprint
}

// checkDelay checks that the nack of m was preceded by a delay asked of
// the broker: at least propMinDelay, or the retry.After delay.
func (w *propWorld) checkDelay(m *propMsg, ctl *propControl, err error) {
	ctl.mu.Lock()
	delays := ctl.delays
	ctl.mu.Unlock()
	if len(delays) == 0 {
		w.t.Fatalf("%s nacked without a delay (%v)", m.uuid, err)
	}
	want := propMinDelay
	if _, ok := retry.AfterDelay(err); ok {
		want = max(want, w.after)
	}
	var ip *middleware.InProgressError
	var ll *middleware.LeaseLostError
	_, final := dlq.AsFinal(err)
	switch {
	case errors.As(err, &ip):
		// Another owner's live lease, or a retry.After's not-before time:
		// wait for it (by the store's clock), up to MaxInProgressWait; 50ms
		// of slack for the real clock's progress.
		left := min(ip.Until.Sub(w.b.now()), defaults.MaxInProgressWait) - 50*time.Millisecond
		want = max(want, left)
	case errors.As(err, &ll), final, w.ran == 0:
	case w.result == resTransient || w.result == resPanic || w.result == resAfter:
		// The backoff after the record's attempt w.ran: at least half its
		// cap (equal jitter), capped at the in-process time.
		want = max(want, min(backoffCap(w.ran)/2, w.b.maxInProc))
	}
	if d := delays[len(delays)-1]; d < want {
		w.t.Fatalf("%s nacked with a delay of %v, want at least %v (%v)", m.uuid, d, want, err)
	}
}

// crash leaves an abandoned lease on m's key: a consumer claimed it and
// died before Complete or Release.
func (w *propWorld) crash(m *propMsg) {
	if m.key == "" {
		return
	}
	w.noteReopen(m)
	res, err := w.store.Claim(context.Background(), idempotency.ClaimRequest{
		Namespace: w.b.ns, Key: m.key, Fingerprint: w.fingerprint(m),
		Lease: w.b.lease, MaxAttempts: propAttempts, Reopen: m.replay,
	})
	if err != nil {
		w.t.Fatalf("crash claim: %v", err)
	}
	if res.Status == idempotency.Acquired {
		w.crashes[m.key]++
		w.seen[m.key] = res.Lease.Attempt
		if res.Lease.Attempt < w.attempts[m.key] {
			w.t.Fatalf("key %s: attempts went down", m.key)
		}
		w.attempts[m.key] = res.Lease.Attempt
	}
}

func (w *propWorld) publish(key, payload, replay string) *propMsg {
	w.seq++
	m := &propMsg{uuid: "m" + strconv.Itoa(w.seq), key: key, payload: payload, replay: replay}
	w.msgs = append(w.msgs, m)
	return m
}

func (w *propWorld) step() {
	t := w.t
	keys := []string{"k1", "k2"}
	switch rapid.IntRange(0, 9).Draw(t, "event") {
	case 0: // a producer publishes a message
		key := rapid.SampledFrom(append(keys, "")).Draw(t, "key") // "": keyless
		payload := "a"
		if rapid.IntRange(0, 9).Draw(t, "conflict") == 0 {
			payload = "b" // same key, another payload
		}
		w.publish(key, payload, "")
	case 1, 2, 3, 4: // the broker delivers a message it holds, or a duplicate of an acked one
		if len(w.msgs) == 0 {
			return
		}
		m := rapid.SampledFrom(w.msgs).Draw(t, "message")
		w.result = rapid.IntRange(0, resCount-1).Draw(t, "result")
		// retry.After(d): from below 0 (the backoff applies) to twice the
		// in-process time (the broker gets all of d).
		w.after = time.Duration(rapid.Int64Range(-int64(propMinDelay), 2*int64(w.b.maxInProc)).Draw(t, "after"))
		w.jitter = rapid.Float64Range(0, 0.999).Draw(t, "jitter")
		if w.result == resShutdown {
			w.permanent = rapid.Bool().Draw(t, "permanent")
		}
		w.deliver(m)
	case 5: // a consumer crashes holding m's lease
		if len(w.msgs) == 0 {
			return
		}
		w.crash(rapid.SampledFrom(w.msgs).Draw(t, "message"))
	case 6: // time passes: up to two leases, or past the retention
		if w.b.expire != nil && rapid.IntRange(0, 9).Draw(t, "expire") == 0 {
			w.b.expire()
			// Every record is forgotten; a later delivery creates it anew.
			clear(w.attempts)
			clear(w.seen)
			clear(w.runs)
			clear(w.crashes)
			clear(w.keyless) // the attempt records of keyless messages too
			return
		}
		w.b.advance(time.Duration(rapid.Int64Range(0, int64(2*w.b.lease)).Draw(t, "advance")))
	case 7: // an operator replays a dead letter
		var dead []*propMsg
		for _, m := range w.msgs {
			if m.dead && m.replay == "" {
				dead = append(dead, m)
			}
		}
		if len(dead) == 0 {
			return
		}
		m := rapid.SampledFrom(dead).Draw(t, "dead")
		w.replays++
		w.publish(m.key, m.payload, "run-"+strconv.Itoa(w.replays))
	case 8: // the dead-letter broker goes down or comes back
		w.dead.mu.Lock()
		w.dead.failing = rapid.Bool().Draw(t, "dlq failing")
		w.dead.mu.Unlock()
	case 9: // every unacked message is delivered once, succeeding
		for _, m := range w.msgs {
			if !m.acked {
				w.result, w.jitter = resSuccess, 0.5
				w.deliver(m)
			}
		}
	}
}

func runProp(rt *rapid.T, b propBackend, maxSteps int) {
	w := newPropWorld(rt, b)
	n := rapid.IntRange(1, maxSteps).Draw(rt, "steps")
	for range n {
		w.step()
	}
}

// TestPropertyChainMemstore runs 100 sequences by default; run the long
// version with -rapid.checks=100000 (about a minute).
func TestPropertyChainMemstore(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) { runProp(rt, memBackend(rt), 60) })
}

// The runs on real stores are short: their leases expire in real time
// (100ms), and a sequence has at most 25 steps. Run only
// TestPropertyChainMemstore with a large -rapid.checks.

func TestPropertyChainRedis(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("surely-prop-%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		iter := client.Scan(context.Background(), 0, prefix+"*", 100).Iterator()
		for iter.Next(context.Background()) {
			client.Del(context.Background(), iter.Val())
		}
	})
	st, err := redisstore.New(ctx, client, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	seq := 0
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		lease := 100 * time.Millisecond
		runProp(rt, propBackend{
			store: st, ns: "prop" + strconv.Itoa(seq), lease: lease, maxInProc: 30 * time.Millisecond,
			now: time.Now, advance: realAdvance(lease),
		}, 25)
	})
}

func TestPropertyChainSQLiteInbox(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seq := 0
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		dsn := "file:" + filepath.Join(dir, fmt.Sprintf("prop%d.db", seq)) + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		st, err := sqlstore.New(db, sqlstore.SQLite)
		if err != nil {
			rt.Fatal(err)
		}
		if err := st.Migrate(context.Background()); err != nil {
			rt.Fatal(err)
		}
		if _, err := db.ExecContext(context.Background(), "CREATE TABLE prop_effects (k TEXT NOT NULL, uuid TEXT NOT NULL)"); err != nil {
			rt.Fatal(err)
		}
		lease := 100 * time.Millisecond
		runProp(rt, propBackend{
			store: st, ns: "prop", lease: lease, maxInProc: 30 * time.Millisecond,
			now: time.Now, advance: realAdvance(lease), inbox: db, inboxStore: st,
		}, 25)
	})
}

// backoffCap is the cap of the policy's backoff delay after attempt n:
// min(1s, 10×propMinDelay × 2^(n-1)) (its retry.WithBackoff).
func backoffCap(n int) time.Duration {
	c := 10 * propMinDelay
	for i := 1; i < n && c < time.Second; i++ {
		c *= 2
	}
	return min(c, time.Second)
}
