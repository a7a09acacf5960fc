package adaptertest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

type suiteTest struct {
	name string
	run  func(t *testing.T, newAdapter func(*testing.T) Adapter, f Features)
}

var suiteTests = []suiteTest{
	{"AckAfterCommit", testAckAfterCommit},
	{"NackRedelivers", testNackRedelivers},
	{"NackDelay", testNackDelay},
	{"RetryAfterPastInProcess", testRetryAfterPastInProcess},
	{"SlowHandler", testSlowHandler},
	{"Malformed", testMalformed},
	{"Load", testLoad},
	{"CrashRedelivers", testCrash},
	{"CloseTimeout", testCloseTimeout},
}

// waitTimeout bounds the wait for one message's deliveries.
const waitTimeout = 30 * time.Second

// effects counts the business effects per operation key.
type effects struct {
	mu sync.Mutex
	m  map[string]int
}

func newEffects() *effects { return &effects{m: map[string]int{}} }

func (e *effects) add(key string) {
	e.mu.Lock()
	e.m[key]++
	e.mu.Unlock()
}

func (e *effects) get(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[key]
}

func (e *effects) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.m))
	for k, v := range e.m {
		out[k] = v
	}
	return out
}

func ackedOnce(key string) func([]seen) bool {
	return func(all []seen) bool {
		for _, s := range all {
			if s.key == key && s.settled == acked {
				return true
			}
		}
		return false
	}
}

// ackedAndSettled holds when a delivery of key was acked and every other
// one was acked or nacked: settlements are recorded asynchronously, so
// under load a redelivery's ack can be seen before the first delivery's
// nack.
func ackedAndSettled(key string) func([]seen) bool {
	acked := ackedOnce(key)
	return func(all []seen) bool {
		for _, s := range all {
			if s.key == key && s.settled == unsettled {
				return false
			}
		}
		return acked(all)
	}
}

// testAckAfterCommit: a delivery stays unsettled while its handler runs,
// is acked only after the store's Complete succeeded, is nacked (and comes
// back) when Complete fails, and an acked message does not come back.
func testAckAfterCommit(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	e := setup(t, newAdapter, f)
	const blocked, commitFails = "order-blocked", "order-commit-fails"
	e.store.failComplete = commitFails
	started, release := make(chan struct{}), make(chan struct{})
	var startOnce, releaseOnce sync.Once
	fx := newEffects()
	e.consume(t, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		key := idempotency.KeyFrom(ctx)
		if key == blocked {
			startOnce.Do(func() { close(started) })
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		fx.add(key)
		return nil, nil
	}, e.defaultChain()))
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the consumer closes

	e.publish(t, order(blocked, "pay 10"))
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("the handler did not start")
	}
	// Longer than AckWait: an adapter that acked on receipt, or let the
	// broker's deadline pass, shows it now.
	time.Sleep(f.AckWait + f.AckWait/2)
	ds := e.rec.of(blocked)
	require.Len(t, ds, 1, "delivered once while the handler runs")
	require.Equal(t, unsettled, ds[0].settled, "not acked nor nacked while the handler runs")
	rec, err := e.store.Get(t.Context(), namespace, blocked)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateInProgress, rec.State)
	releaseOnce.Do(func() { close(release) })
	e.rec.waitFor(t, waitTimeout, "acked after the handler returned", ackedOnce(blocked))
	ds = e.rec.of(blocked)
	require.Len(t, ds, 1)
	require.NoError(t, ds[0].chainErr)
	require.Equal(t, 1, ds[0].completesAtAck, "acked after Complete")
	require.Equal(t, 1, fx.get(blocked))

	// Complete fails on the first attempt: the delivery is nacked, the
	// message comes back, and a later attempt commits and acks it.
	e.publish(t, order(commitFails, "pay 20"))
	e.rec.waitFor(t, waitTimeout, "acked after a later Complete", ackedAndSettled(commitFails))
	ds = e.rec.of(commitFails)
	require.GreaterOrEqual(t, len(ds), 2, "redelivered after the failed Complete")
	require.ErrorIs(t, ds[0].chainErr, middleware.ErrStoreUnavailable)
	require.Equal(t, nacked, ds[0].settled, "a failed Complete must not ack")
	last := ds[len(ds)-1]
	require.Equal(t, acked, last.settled)
	require.Equal(t, 1, last.completesAtAck)
	for _, d := range ds[:len(ds)-1] {
		require.NotEqual(t, acked, d.settled, "only the delivery that committed is acked")
	}
	rec, err = e.store.Get(t.Context(), namespace, commitFails)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 2, rec.Attempts)
	// Lease mode: the first attempt's effect happened before its Complete
	// failed, so the second attempt ran it again (told Previous unknown).
	require.Equal(t, 2, fx.get(commitFails))

	if !f.NoCrashRecovery {
		before := len(e.rec.all())
		time.Sleep(2 * f.AckWait)
		require.Len(t, e.rec.all(), before, "an acked message came back: the broker did not get the ack")
	}
}

// testNackRedelivers: a failed delivery is nacked and redelivered, and the
// delivery count the handler reads grows.
func testNackRedelivers(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	e := setup(t, newAdapter, f)
	const key = "order-1"
	var mu sync.Mutex
	var infos []delivery.Info
	var hasInfo []bool
	fx := newEffects()
	e.consume(t, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		info, ok := delivery.InfoFrom(msg.Context())
		mu.Lock()
		infos, hasInfo = append(infos, info), append(hasInfo, ok)
		n := len(infos)
		mu.Unlock()
		if n == 1 {
			return nil, errors.New("database busy")
		}
		fx.add(key)
		return nil, nil
	}, e.defaultChain()))
	e.publish(t, order(key, "pay 10"))
	e.rec.waitFor(t, waitTimeout, "acked after the redelivery", ackedAndSettled(key))
	ds := e.rec.of(key)
	require.Len(t, ds, 2)
	require.Equal(t, nacked, ds[0].settled)
	require.Equal(t, acked, ds[1].settled)
	require.Equal(t, 1, fx.get(key))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, infos, 2)
	if f.DeliveryCount {
		require.True(t, hasInfo[0] && hasInfo[1], "DeliveryCount: the handler must find delivery.Info in its context")
		require.Equal(t, delivery.Info{Count: 1, Redelivered: false}, infos[0])
		require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, infos[1], "the count grows on redelivery")
	} else {
		for i := range infos {
			require.Zero(t, infos[i].Count, "no DeliveryCount: the adapter must not make one up")
		}
	}
}

// nackTolerance is what a broker-side delay may fall short of the delay
// asked for, in the measurements (NATS: within 5ms of 500ms; a wait in the
// chain: never short). It bounds the gap from below only.
const nackTolerance = 50 * time.Millisecond

// testNackDelay: a delivery that fails with retry.After(d) comes back no
// sooner than d later; with NackDelay the broker holds it back
// (Control.NackAfter returned true), otherwise the chain waits.
func testNackDelay(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	e := setup(t, newAdapter, f)
	const key, delay = "order-1", 500 * time.Millisecond
	c := e.defaultChain()
	c.inProcess = 2 * delay // the delay fits: nacked with it, not cut short
	c.lease = max(c.lease, 2*c.inProcess)
	e.consume(t, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		op, _ := idempotency.OperationFrom(msg.Context())
		if op.Attempt == 1 {
			return nil, retry.After(delay, errors.New("rate limited"))
		}
		return nil, nil
	}, c))
	e.publish(t, order(key, "pay 10"))
	e.rec.waitFor(t, waitTimeout, "acked after the delayed redelivery", ackedAndSettled(key))
	ds := e.rec.of(key)
	require.Len(t, ds, 2)
	require.Equal(t, nacked, ds[0].settled)
	gap := ds[1].at.Sub(ds[0].at)
	t.Logf("redelivery gap %v for a %v nack delay (NackDelay=%v)", gap, delay, f.NackDelay)
	require.GreaterOrEqual(t, gap, delay-nackTolerance, "redelivered too early")
	var brokerDelayed bool
	for _, call := range ds[0].nackAfter {
		brokerDelayed = brokerDelayed || call.ok
		if call.ok {
			require.GreaterOrEqual(t, call.d, delay-nackTolerance)
		}
	}
	if f.NackDelay {
		require.True(t, ds[0].hasControl, "NackDelay: the adapter must put a delivery.Control in the context")
		require.True(t, brokerDelayed, "NackDelay: Control.NackAfter must accept the delay (calls: %v)", ds[0].nackAfter)
	} else {
		require.False(t, brokerDelayed, "no NackDelay: Control.NackAfter must return false")
	}
}

// testSlowHandler: a handler running for 3×AckWait runs once. With
// LeaseExtension the broker does not even redeliver the message (the
// dedup step extends its deadline); a control run without surely's chain
// shows that it would.
func testSlowHandler(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	slow := 3 * f.AckWait
	consumers := 2
	if f.NoConsumerGroups {
		consumers = 1
	}
	t.Run("extended", func(t *testing.T) {
		t.Parallel()
		e := setup(t, newAdapter, f)
		const key = "order-slow"
		var calls atomic.Int32
		fx := newEffects()
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			if err := sleepCtx(msg.Context(), slow); err != nil {
				return nil, err
			}
			fx.add(key)
			return nil, nil
		}, e.defaultChain())
		for range consumers {
			e.consume(t, h)
		}
		e.publish(t, order(key, "slow"))
		e.rec.waitFor(t, slow+waitTimeout, "acked after the slow handler", ackedOnce(key))
		time.Sleep(2 * f.AckWait) // a redelivery would show up by now
		require.EqualValues(t, 1, calls.Load(), "the slow handler ran twice")
		require.Equal(t, 1, fx.get(key))
		ds := e.rec.of(key)
		if f.LeaseExtension {
			require.Len(t, ds, 1, "LeaseExtension: the broker redelivered a message whose handler was still running")
			require.Positive(t, ds[0].extends, "the dedup step extended the delivery")
		} else {
			t.Logf("%d deliveries (no LeaseExtension: the store's lease refused the redeliveries)", len(ds))
		}
	})
	if !f.LeaseExtension || f.NoConsumerGroups {
		return
	}
	t.Run("control without surely", func(t *testing.T) {
		t.Parallel()
		e := setup(t, newAdapter, f)
		const key = "order-slow"
		var calls atomic.Int32
		raw := func(msg *message.Message) ([]*message.Message, error) {
			if calls.Add(1) == 1 {
				_ = sleepCtx(msg.Context(), slow)
			}
			return nil, nil
		}
		for range consumers {
			e.consume(t, raw)
		}
		e.publish(t, order(key, "slow"))
		e.rec.waitFor(t, slow+waitTimeout, "the broker redelivers a message not acked within AckWait",
			func(all []seen) bool { return len(all) >= 2 })
	})
}

// testMalformed: a message the subscriber cannot decode is dead-lettered
// with reason decode and its raw bytes, acked, and the subscription goes on.
func testMalformed(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	if f.NoMalformed {
		t.Skip("Features.NoMalformed: messages travel as Go values, none can arrive undecodable")
	}
	e := setup(t, newAdapter, f)
	fx := newEffects()
	e.consume(t, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		fx.add(idempotency.KeyFrom(msg.Context()))
		return nil, nil
	}, e.defaultChain()))
	raw := e.a.PublishMalformed(t, e.topic)
	keys := []string{"order-a", "order-b", "order-c"}
	for _, k := range keys {
		e.publish(t, order(k, "pay"))
	}
	e.rec.waitFor(t, waitTimeout, "the good messages processed and the malformed one dead-lettered", func([]seen) bool {
		for _, k := range keys {
			if fx.get(k) != 1 {
				return false
			}
		}
		return len(e.deadLetters()) >= 1
	})
	dead := e.deadLetters()
	require.Len(t, dead, 1)
	d := dead[0]
	require.Equal(t, string(dlq.ReasonDecode), d.Metadata.Get(dlq.KeyReason))
	require.Equal(t, raw, []byte(d.Payload), "the dead letter carries the raw bytes")
	require.NotEmpty(t, d.Metadata.Get(delivery.KeyDecodeError), "the decoding error travels in the dead letter")
	require.Contains(t, d.Metadata.Get(dlq.KeyError), middleware.ErrUndecodable.Error())
	var marked []seen
	e.rec.waitFor(t, waitTimeout, "the malformed message acked", func(all []seen) bool {
		marked = marked[:0]
		for _, s := range all {
			if _, ok := s.metadata[delivery.KeyDecodeError]; ok {
				marked = append(marked, s)
			}
		}
		return len(marked) == 1 && marked[0].settled == acked
	})
	require.NoError(t, marked[0].chainErr)
	if f.DeliveryCount {
		require.True(t, marked[0].hasInfo, "an undecodable message still carries its delivery.Info")
	}
}

// The load test runs for as long as it makes progress: it fails when no
// delivery began or was settled for loadStallTimeout (a stall, on any
// machine), or after loadTimeout in all. A loaded machine is slow, not
// stalled: on one shared with other test binaries the run took over 90s.
const (
	loadStallTimeout = 30 * time.Second
	loadTimeout      = 5 * time.Minute
)

// testLoad: Features.Messages messages through two competing consumers,
// with transient failures on 10% of the attempts (each a nack and a
// redelivery) and a few poison messages: every good message's effect
// happens exactly once, every poison message is dead-lettered, none is lost.
func testLoad(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	e := setup(t, newAdapter, f)
	n := f.Messages
	poisonEach := min(3, n/20) // permanent failures, and failures on every attempt
	seed := rand.Uint64()
	t.Logf("%d messages, %d poison, failure seed %d", n, 2*poisonEach, seed)
	fails := func(key string, attempt int) bool {
		if attempt > 3 { // a good message always succeeds before its budget is spent
			return false
		}
		h := fnv.New64a()
		_, _ = fmt.Fprintf(h, "%d/%s/%d", seed, key, attempt)
		return h.Sum64()%10 == 0
	}
	fx := newEffects()
	var failures atomic.Int32
	c := e.defaultChain()
	c.maxAttempts = 5
	h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		op, _ := idempotency.OperationFrom(msg.Context())
		switch {
		case strings.HasPrefix(op.Key, "poison-permanent-"):
			return nil, retry.Permanent(errors.New("poison: cannot ever succeed"))
		case strings.HasPrefix(op.Key, "poison-transient-"):
			return nil, errors.New("poison: fails on every attempt")
		case fails(op.Key, op.Attempt):
			failures.Add(1)
			return nil, errors.New("transient failure")
		}
		fx.add(op.Key)
		return nil, nil
	}, c)
	consumers := 2
	if f.NoConsumerGroups {
		consumers = 1
	}
	for range consumers {
		e.consume(t, h)
	}

	var good []string
	poison := map[string]dlq.Reason{}
	step := n / (2*poisonEach + 1)
	msgs := make([]*message.Message, 0, n)
	for i := range n {
		key := fmt.Sprintf("good-%05d", i)
		if j := i/max(step, 1) - 1; i%max(step, 1) == 0 && j >= 0 && j < 2*poisonEach {
			if j%2 == 0 {
				key = fmt.Sprintf("poison-permanent-%05d", i)
				poison[key] = dlq.ReasonPermanent
			} else {
				key = fmt.Sprintf("poison-transient-%05d", i)
				poison[key] = dlq.ReasonExhausted
			}
		} else {
			good = append(good, key)
		}
		msgs = append(msgs, order(key, "payload of "+key))
	}
	start := time.Now()
	for batch := range slices.Chunk(msgs, 100) {
		e.publish(t, batch...)
	}
	published := time.Since(start)

	deadKeys := func() map[string]*message.Message {
		out := map[string]*message.Message{}
		for _, d := range e.deadLetters() {
			out[d.Metadata.Get(idempotency.DefaultMetadataKey)] = d
		}
		return out
	}
	e.rec.waitForProgress(t, loadStallTimeout, loadTimeout, "every good message processed and every poison message dead-lettered", func([]seen) bool {
		got := fx.snapshot()
		for _, k := range good {
			if got[k] == 0 {
				return false
			}
		}
		return len(deadKeys()) >= len(poison)
	})
	took := time.Since(start)
	e.rec.waitFor(t, waitTimeout, "every delivery settled", func(all []seen) bool {
		for _, s := range all {
			if s.settled == unsettled {
				return false
			}
		}
		return true
	})

	got := fx.snapshot()
	for _, k := range good {
		require.Equal(t, 1, got[k], "effect of %s", k)
		require.Equal(t, 1, e.store.completes(k), "commits of %s", k)
	}
	for k := range poison {
		require.Zero(t, got[k], "a poison message's effect happened")
	}
	require.Len(t, got, len(good), "effects of unknown keys")
	dead := deadKeys()
	require.Len(t, dead, len(poison), "dead letters of good messages")
	for k, reason := range poison {
		d, ok := dead[k]
		require.True(t, ok, "poison message %s not dead-lettered", k)
		require.Equal(t, string(reason), d.Metadata.Get(dlq.KeyReason), "reason of %s", k)
	}

	all := e.rec.all()
	perConsumer := map[string]int{}
	nacks := 0
	for _, s := range all {
		perConsumer[s.handler]++
		if s.settled == nacked {
			nacks++
		}
	}
	t.Logf("published in %v; all done in %v (%.0f msg/s); %d deliveries, %d nacked, %d transient failures, per consumer %v",
		published.Round(time.Millisecond), took.Round(time.Millisecond), float64(n)/took.Seconds(),
		len(all), nacks, failures.Load(), perConsumer)
	require.Len(t, perConsumer, consumers, "every consumer got messages")
}
