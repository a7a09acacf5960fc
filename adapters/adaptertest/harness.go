package adaptertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/retry"
)

// Names every test uses.
const (
	namespace   = "orders"
	deadTopic   = "dead"
	handlerName = "orders-handler"
)

// env is one test's view of the adapter: its own topic, consumer group,
// publisher, store and in-memory dead letter.
type env struct {
	a     Adapter
	f     Features
	topic string
	group string
	pub   message.Publisher
	store *countingStore
	dead  *faults.Publisher
	rec   *recorder
	seq   int
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// setup builds the adapter, a topic and a publisher for one test. The store
// comes from Features.NewStore and is shared by every consumer of the test
// (they run in this process); the dead letter is an in-memory publisher.
func setup(t *testing.T, newAdapter func(t *testing.T) Adapter, f Features) *env {
	t.Helper()
	a := newAdapter(t)
	require.NotNil(t, a, "newAdapter returned nil")
	store := f.NewStore(t)
	require.NotNil(t, store, "Features.NewStore returned nil")
	e := &env{
		a: a, f: f,
		group: "g" + randomHex(6),
		store: &countingStore{Store: store, completed: map[string]int{}},
		dead:  faults.NewPublisher(0),
		rec:   newRecorder(),
	}
	e.rec.store = e.store
	t.Cleanup(e.rec.stop) // registered first: runs after every consumer is closed
	e.topic = a.NewTopic(t)
	require.NotEmpty(t, e.topic, "NewTopic returned no topic")
	e.pub = a.NewPublisher(t)
	require.NotNil(t, e.pub, "NewPublisher returned nil")
	t.Cleanup(func() { require.NoError(t, e.pub.Close(), "publisher Close") })
	return e
}

// order builds the message of one operation: its key in metadata.
func order(key, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	msg.Metadata.Set("tenant", "acme")
	return msg
}

func (e *env) publish(t *testing.T, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, e.pub.Publish(e.topic, msgs...))
}

// chainConfig sizes the surely chain of a test.
type chainConfig struct {
	lease       time.Duration
	maxAttempts int
	// inProcess bounds the in-process retrying of one delivery.
	inProcess time.Duration
}

// defaultChain: a lease of AckWait, so the dedup step extends the broker's
// ack deadline every AckWait/3; one attempt per delivery, so that every
// failure goes back to the broker.
func (e *env) defaultChain() chainConfig {
	return chainConfig{lease: e.f.AckWait, maxAttempts: 5, inProcess: e.f.AckWait / 2}
}

// chain wraps fn in handler.New over the test's store and dead letter.
func (e *env) chain(t *testing.T, fn message.HandlerFunc, c chainConfig) message.HandlerFunc {
	t.Helper()
	policy, err := retry.NewPolicy(
		retry.WithMaxAttempts(c.maxAttempts),
		retry.WithInProcessAttempts(1),
		retry.WithBackoff(time.Millisecond, 5*time.Millisecond),
		retry.WithMaxInProcessTime(c.inProcess),
	)
	require.NoError(t, err)
	h, err := handler.New(fn,
		handler.WithStore(e.store, namespace),
		handler.WithDeadLetter(e.dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(c.lease),
		handler.WithConsumerGroup(e.group),
	)
	require.NoError(t, err)
	return h
}

// consume runs a router with one consumer handler, h, on a new subscriber
// of the test's group. The recorder sees every delivery before h. When the
// test ends the subscriber is closed first, then the router.
func (e *env) consume(t *testing.T, h message.HandlerFunc) {
	t.Helper()
	sub := e.a.NewSubscriber(t, e.group)
	require.NotNil(t, sub, "NewSubscriber returned nil")
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	r.AddMiddleware(e.rec.middleware)
	e.seq++
	r.AddConsumerHandler(fmt.Sprintf("%s-%d", handlerName, e.seq), e.topic, sub, func(msg *message.Message) error {
		_, err := h(msg)
		return err
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30s")
	}
	t.Cleanup(func() {
		require.NoError(t, sub.Close(), "subscriber Close")
		require.NoError(t, r.Close(), "router Close")
		require.NoError(t, <-done, "router Run")
	})
}

// deadLetters returns the dead letters published so far.
func (e *env) deadLetters() []*message.Message { return e.dead.Published(deadTopic) }

// countingStore is the test's store; it records, per key, how many
// Complete calls succeeded, and can fail Complete on demand.
type countingStore struct {
	idempotency.Store
	mu        sync.Mutex
	completed map[string]int
	// failComplete makes Complete fail for a key's first attempt.
	failComplete string
}

func (s *countingStore) Complete(ctx context.Context, l idempotency.Lease, o idempotency.Outcome) error {
	s.mu.Lock()
	fail := l.Key == s.failComplete && l.Attempt == 1
	s.mu.Unlock()
	if fail {
		return faults.ErrInjected
	}
	err := s.Store.Complete(ctx, l, o)
	if err == nil {
		s.mu.Lock()
		s.completed[l.Key]++
		s.mu.Unlock()
	}
	return err
}

func (s *countingStore) completes(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completed[key]
}

// ---- the recorder ----

// settlement is how the router settled a delivery.
type settlement int

const (
	unsettled settlement = iota
	acked
	nacked
)

// seen is one delivery as the router handed it to the handler chain.
type seen struct {
	at         time.Time
	uuid       string
	handler    string
	key        string
	payload    string
	metadata   message.Metadata
	info       delivery.Info
	hasInfo    bool
	hasControl bool
	nackAfter  []nackAfterCall
	extends    int
	chainErr   error
	chainTook  time.Duration
	settled    settlement
	// completesAtAck is how many Completes of the key had succeeded when
	// the delivery was acked.
	completesAtAck int
}

type nackAfterCall struct {
	d  time.Duration
	ok bool
}

// recorder is a router middleware, outside surely's chain, that records
// every delivery: its delivery facts, what the chain asked of its
// delivery.Control, and how the router settled it.
type recorder struct {
	mu      sync.Mutex
	seen    []*seen
	changed chan struct{} // closed and replaced on every change
	done    chan struct{}
	wg      sync.WaitGroup
	store   *countingStore // for completesAtAck; may be nil
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), done: make(chan struct{})}
}

func (r *recorder) stop() {
	close(r.done)
	r.wg.Wait()
}

func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		s := &seen{at: time.Now(), uuid: msg.UUID, handler: message.HandlerNameFromCtx(ctx), key: msg.Metadata.Get(idempotency.DefaultMetadataKey),
			payload: string(msg.Payload), metadata: copyMetadata(msg.Metadata)}
		s.info, s.hasInfo = delivery.InfoFrom(ctx)
		if c, ok := delivery.ControlFrom(ctx); ok {
			s.hasControl = true
			msg.SetContext(delivery.WithControl(ctx, &spyControl{Control: c, r: r, s: s}))
		}
		r.mu.Lock()
		r.seen = append(r.seen, s)
		r.notify()
		r.mu.Unlock()

		msgs, err := h(msg)
		msg.SetContext(ctx)

		r.mu.Lock()
		s.chainErr, s.chainTook = err, time.Since(s.at)
		r.notify()
		r.mu.Unlock()
		r.wg.Add(1)
		go r.watch(msg, s)
		return msgs, err
	}
}

// watch waits for the router to settle msg.
func (r *recorder) watch(msg *message.Message, s *seen) {
	defer r.wg.Done()
	var got settlement
	select {
	case <-msg.Acked():
		got = acked
	case <-msg.Nacked():
		got = nacked
	case <-r.done:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.settled = got
	if got == acked && r.store != nil {
		s.completesAtAck = r.store.completes(s.key)
	}
	r.notify()
}

// all returns a snapshot of the deliveries so far.
func (r *recorder) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]seen, len(r.seen))
	for i, s := range r.seen {
		out[i] = *s
		out[i].nackAfter = append([]nackAfterCall(nil), s.nackAfter...)
	}
	return out
}

// of returns the deliveries of key.
func (r *recorder) of(key string) []seen {
	var out []seen
	for _, s := range r.all() {
		if s.key == key {
			out = append(out, s)
		}
	}
	return out
}

// waitFor waits until cond holds on the deliveries, failing the test with
// what after timeout.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]seen) bool) []seen {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		all := r.all()
		if cond(all) {
			return all
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond): // conditions may read state outside the recorder
		case <-deadline.C:
			t.Fatalf("%s: not within %v (%d deliveries)", what, timeout, len(all))
		}
	}
}

// waitForProgress is waitFor for a long run on a machine of unknown speed:
// it fails only when cond does not hold and the recorder saw no change (no
// delivery began or was settled) for idle, a stall, or when limit has
// passed in all.
func (r *recorder) waitForProgress(t *testing.T, idle, limit time.Duration, what string, cond func([]seen) bool) []seen {
	t.Helper()
	all, err := r.progress(idle, limit, cond)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return all
}

// progress waits for cond as waitForProgress describes; it returns an
// error on a stall or at limit.
func (r *recorder) progress(idle, limit time.Duration, cond func([]seen) bool) ([]seen, error) {
	start := time.Now()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	stalled := time.NewTimer(idle)
	defer stalled.Stop()
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		all := r.all()
		if cond(all) {
			return all, nil
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond): // conditions may read state outside the recorder
		case <-stalled.C:
			select {
			case <-changed: // a change came with the stall's tick: progress
			default:
				return nil, fmt.Errorf("no delivery began or was settled for %v (%d deliveries in %v)",
					idle, len(all), time.Since(start).Round(time.Millisecond))
			}
		case <-deadline.C:
			return nil, fmt.Errorf("not within %v (%d deliveries)", limit, len(all))
		}
		// Whichever case woke us, a change since changed was read is
		// progress: one made while the tick was served is not missed.
		select {
		case <-changed:
			stalled.Reset(idle)
		default:
		}
	}
}

// spyControl records what the chain asks of the adapter's delivery.Control.
type spyControl struct {
	delivery.Control
	r *recorder
	s *seen
}

func (c *spyControl) NackAfter(d time.Duration) bool {
	ok := c.Control.NackAfter(d)
	c.r.mu.Lock()
	c.s.nackAfter = append(c.s.nackAfter, nackAfterCall{d: d, ok: ok})
	c.r.mu.Unlock()
	return ok
}

func (c *spyControl) Extend(ctx context.Context) error {
	c.r.mu.Lock()
	c.s.extends++
	c.r.mu.Unlock()
	return c.Control.Extend(ctx)
}

func copyMetadata(md message.Metadata) message.Metadata {
	out := make(message.Metadata, len(md))
	for k, v := range md {
		out[k] = v
	}
	return out
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
