package handler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	wmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

func TestMain(m *testing.M) {
	// Watermill's map repository starts a cleanup goroutine it never stops.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/ThreeDotsLabs/watermill/message/router/middleware.(*mapExpiringKeyRepository).cleanOutLoop"))
}

const deadTopic = "dead"

type env struct {
	store    *faults.Store
	mem      idempotency.Store
	dead     *faults.Publisher
	outcomes sync.Map // handler.Outcome → *atomic.Int64
}

func setup(t *testing.T, deadFailFirst int) *env {
	t.Helper()
	mem, err := memstore.New()
	require.NoError(t, err)
	return &env{store: faults.NewStore(mem), mem: mem, dead: faults.NewPublisher(deadFailFirst)}
}

func (e *env) count(o handler.Outcome) int64 {
	v, _ := e.outcomes.LoadOrStore(o, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

// chain builds handler.New with test-friendly defaults; opts come last and win.
func (e *env) chain(t *testing.T, fn message.HandlerFunc, opts ...handler.Option) message.HandlerFunc {
	t.Helper()
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(time.Second))
	require.NoError(t, err)
	base := []handler.Option{
		handler.WithStore(e.store, "orders"),
		handler.WithDeadLetter(e.dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(5 * time.Second),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			v, _ := e.outcomes.LoadOrStore(p.Outcome, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return handler.OutcomeResult{}
		}),
	}
	h, err := handler.New(fn, append(base, opts...)...)
	require.NoError(t, err)
	return h
}

// delivery builds one delivery of an operation: a fresh message UUID, as a
// broker redelivery or a duplicate publish would have.
func delivery(key, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	if key != "" {
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	}
	return msg
}

// deliverUntilAck redelivers like a broker until the chain acks (nil), at
// most max times, and returns the number of deliveries.
func deliverUntilAck(t *testing.T, h message.HandlerFunc, key, payload string, max int) int {
	t.Helper()
	for i := 1; i <= max; i++ {
		if _, err := h(delivery(key, payload)); err == nil {
			return i
		}
	}
	t.Fatalf("not acked after %d deliveries", max)
	return 0
}

func TestFailOnceThenSucceedsIsProcessed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls, effects atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("database busy")
			}
			effects.Add(1)
			return nil, nil
		})
		_, err := h(delivery("order-1", "pay 10"))
		require.Error(t, err, "the failed delivery must be nacked")
		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.EqualValues(t, 2, calls.Load(), "the redelivery must run the handler, not be taken for a duplicate")
		require.EqualValues(t, 1, effects.Load())
		require.EqualValues(t, 1, e.count(handler.OutcomeProcessed))
		require.EqualValues(t, 0, e.count(handler.OutcomeDuplicate))
	})
}

// Watermill's Deduplicator records the key before the handler runs: the
// redelivery of a failed message is acked as a duplicate and its effect is
// lost. This test pins that contrast.
func TestWatermillDeduplicatorLosesFailedMessage(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	fn := func(msg *message.Message) ([]*message.Message, error) {
		if calls.Add(1) == 1 {
			return nil, errors.New("database busy")
		}
		return nil, nil
	}
	repo, err := wmw.NewMapExpiringKeyRepository(time.Minute)
	require.NoError(t, err)
	d := wmw.Deduplicator{KeyFactory: func(m *message.Message) (string, error) { return m.Metadata.Get(idempotency.DefaultMetadataKey), nil },
		Repository: repo}
	h := d.Middleware(fn)
	_, err = h(delivery("order-1", "pay 10"))
	require.Error(t, err)
	_, err = h(delivery("order-1", "pay 10"))
	require.NoError(t, err, "acked")
	require.EqualValues(t, 1, calls.Load(), "Watermill's Deduplicator acked the redelivery without running it: lost")
}

func TestDuplicateReemitsProducedMessages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			out := message.NewMessage(watermill.NewUUID(), []byte("charged:"+string(msg.Payload)))
			out.Metadata.Set("kind", "charged")
			return []*message.Message{out, message.NewMessage(watermill.NewUUID(), []byte{0xff, 0x00})}, nil
		})
		first, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		again, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load())
		require.Len(t, again, 2)
		for i := range first {
			require.Equal(t, first[i].UUID, again[i].UUID, "a duplicate re-emits the same UUIDs")
			require.Equal(t, first[i].Payload, again[i].Payload)
			require.Equal(t, first[i].Metadata, again[i].Metadata)
		}
		require.EqualValues(t, 1, e.count(handler.OutcomeDuplicate))
	})
}

func TestInProgressIsNackedAndNotCounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		release := make(chan struct{})
		var running, maxRunning, calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			if n > maxRunning.Load() {
				maxRunning.Store(n)
			}
			<-release
			return nil, nil
		})
		done := make(chan error)
		go func() { _, err := h(delivery("order-1", "pay 10")); done <- err }()
		synctest.Wait()
		_, err := h(delivery("order-1", "pay 10"))
		var ip *middleware.InProgressError
		require.ErrorAs(t, err, &ip, "a second delivery while the first runs is nacked")
		rec, err := e.mem.Get(context.Background(), "orders", "order-1")
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts, "an in-progress collision is not an attempt")
		close(release)
		require.NoError(t, <-done)
		require.EqualValues(t, 1, calls.Load())
		require.EqualValues(t, 1, e.count(handler.OutcomeInProgress))
	})
}

func TestSlowHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			time.Sleep(2 * time.Second) // 4 lease terms
			return nil, nil
		}, handler.WithLease(500*time.Millisecond), handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(100*time.Millisecond))))
		done := make(chan error)
		go func() { _, err := h(delivery("order-1", "pay 10")); done <- err }()
		for range 6 {
			time.Sleep(300 * time.Millisecond)
			_, err := h(delivery("order-1", "pay 10"))
			if err == nil {
				break // the first completed: this one is a duplicate
			}
			var ip *middleware.InProgressError
			require.ErrorAs(t, err, &ip)
		}
		require.NoError(t, <-done)
		require.EqualValues(t, 1, calls.Load(), "the lease was extended: no second run")
		require.Positive(t, e.store.Calls("Extend"))
	})
}

func mustPolicy(t *testing.T, opts ...retry.Option) *retry.Policy {
	t.Helper()
	base := []retry.Option{retry.WithMaxAttempts(3), retry.WithInProcessAttempts(1), retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond)}
	p, err := retry.NewPolicy(append(base, opts...)...)
	require.NoError(t, err)
	return p
}

func TestPanicIsRecordedThenDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) { panic("nil map write") })
		n := deliverUntilAck(t, h, "order-1", "pay 10", 10)
		require.Equal(t, 4, n, "3 attempts, then the exhausted claim dead-letters without running")
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		md := dead[0].Metadata
		require.Equal(t, string(dlq.ReasonPanic), md.Get(dlq.KeyReason))
		require.Equal(t, "3", md.Get(dlq.KeyAttempts))
		hist, err := envelope.ParseHistory(md.Get(dlq.KeyHistory))
		require.NoError(t, err)
		require.Len(t, hist, 3)
		require.Contains(t, hist[2].Error, "nil map write")
		require.Contains(t, hist[2].Stack, "goroutine", "the panic's stack is in the history")
		require.Equal(t, "pay 10", string(dead[0].Payload))
	})
}

func TestPermanentErrorIsDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, retry.Permanent(errors.New("card declined"))
		})
		src := delivery("order-1", "pay 10")
		src.Metadata.Set("tenant", "acme")
		_, err := h(src)
		require.NoError(t, err, "acked after the dead letter was published")
		// A redelivery (say the ack was lost) does not run the handler again.
		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 2)
		md := dead[0].Metadata
		require.Equal(t, envelope.DeadLetterUUID(src.UUID), dead[0].UUID)
		require.Equal(t, src.UUID, md.Get(dlq.KeyOriginalUUID))
		require.Equal(t, "acme", md.Get("tenant"), "original metadata travels")
		require.Equal(t, "order-1", md.Get(dlq.KeyOperationKey))
		require.Equal(t, string(dlq.ReasonPermanent), md.Get(dlq.KeyReason))
		require.Equal(t, "card declined", md.Get(dlq.KeyError))
		require.Contains(t, md.Get(dlq.KeyErrorTypes), "*retry.permanentError")
		require.Equal(t, envelope.Version, md.Get(dlq.KeyVersion))
		require.NotEmpty(t, md.Get(dlq.KeyFingerprint))
		for _, d := range dead {
			require.Equal(t, "orders", d.Metadata.Get(dlq.KeyNamespace), "inspect and replay find the record by it")
			require.Equal(t, defaults.Retention.String(), d.Metadata.Get(dlq.KeyRetention))
		}
		require.EqualValues(t, 2, e.count(handler.OutcomeDeadLettered))
		require.EqualValues(t, 0, e.count(handler.OutcomeProcessed), "a dead letter is not reported as processed")
	})
}

func TestConflictIsDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
		_, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		_, err = h(delivery("order-1", "pay 9999"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		require.Equal(t, string(dlq.ReasonConflict), dead[0].Metadata.Get(dlq.KeyReason))
		require.Equal(t, "pay 9999", string(dead[0].Payload))
	})
}

func TestMissingAndInvalidKeys(t *testing.T) {
	t.Parallel()
	onlyMetadata, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	require.NoError(t, err)
	cases := []struct {
		name    string
		key     string
		missing handler.MissingKeyPolicy
		ran     bool
		reason  dlq.Reason
	}{
		{"missing key rejected by default", "", handler.RejectMissingKey, false, dlq.ReasonNoKey},
		{"missing key processed on opt-in", "", handler.ProcessWithoutDedup, true, ""},
		{"oversized key", strings.Repeat("k", defaults.MaxKeyLen+1), handler.ProcessWithoutDedup, false, dlq.ReasonNoKey},
		{"control bytes", "order\x00-1", handler.ProcessWithoutDedup, false, dlq.ReasonNoKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				var calls atomic.Int32
				h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil },
					handler.WithIdentity(onlyMetadata, tc.missing))
				_, err := h(delivery(tc.key, "pay 10"))
				require.NoError(t, err)
				require.Equal(t, tc.ran, calls.Load() == 1)
				dead := e.dead.Published(deadTopic)
				if tc.reason == "" {
					require.Empty(t, dead)
					require.EqualValues(t, 1, e.count(handler.OutcomeProcessedWithoutDedup))
					return
				}
				require.Len(t, dead, 1)
				require.Equal(t, string(tc.reason), dead[0].Metadata.Get(dlq.KeyReason))
				require.Equal(t, "pay 10", string(dead[0].Payload), "the payload is kept intact")
			})
		})
	}
}

func TestFailingDeadLetterPublishNacksAndLosesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 2)
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			return nil, retry.Permanent(errors.New("card declined"))
		})
		for range 2 {
			start := time.Now()
			_, err := h(delivery("order-1", "pay 10"))
			require.ErrorIs(t, err, faults.ErrInjected, "the publish error")
			require.ErrorContains(t, err, "card declined", "joined with the cause")
			require.GreaterOrEqual(t, time.Since(start), defaults.DeadLetterRetryWait, "no hot loop")
		}
		_, err := h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.Len(t, e.dead.Published(deadTopic), 1)
		require.EqualValues(t, 2, e.count(handler.OutcomeDeadLetterFailed))
	})
}

func TestRedactorSeesEveryErrorText(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			return nil, errors.New("dial postgres://app:hunter2@db/orders: refused")
		}, handler.WithRedactor(func(s string) string { return strings.ReplaceAll(s, "hunter2", "***") }))
		deliverUntilAck(t, h, "order-1", "pay 10", 10)
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		for k, v := range dead[0].Metadata {
			require.NotContains(t, v, "hunter2", "metadata %s leaks the secret", k)
		}
		rec, err := e.mem.Get(context.Background(), "orders", "order-1")
		require.NoError(t, err)
		for _, a := range rec.History {
			require.NotContains(t, a.Error, "hunter2")
		}
		require.Contains(t, dead[0].Metadata.Get(dlq.KeyHistory), "***")
	})
}

func TestHandlerSeesOperationAndPreviousAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var seen []idempotency.Operation
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			op, ok := idempotency.OperationFrom(msg.Context())
			require.True(t, ok)
			require.Equal(t, op.Key, idempotency.KeyFrom(msg.Context()))
			seen = append(seen, op)
			if len(seen) == 1 {
				return nil, errors.New("gateway 502")
			}
			return nil, nil
		}, handler.WithLease(time.Second), handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(100*time.Millisecond))))

		// A consumer that died holding the lease: its claim is never released.
		_, err := e.mem.Claim(context.Background(), idempotency.ClaimRequest{Namespace: "orders", Key: "order-1",
			Fingerprint: fingerprint(t, "pay 10"), Lease: time.Second, MaxAttempts: 5})
		require.NoError(t, err)
		_, err = h(delivery("order-1", "pay 10"))
		var ip *middleware.InProgressError
		require.ErrorAs(t, err, &ip, "the dead owner's lease is still live")
		time.Sleep(time.Second)

		_, err = h(delivery("order-1", "pay 10"))
		require.Error(t, err)
		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)

		require.Len(t, seen, 2)
		require.Equal(t, 2, seen[0].Attempt, "the crashed attempt was counted")
		require.Equal(t, idempotency.ResultUnknown, seen[0].Previous, "its lease expired: the effect may have happened")
		require.Equal(t, 3, seen[1].Attempt)
		require.Equal(t, idempotency.ResultFailed, seen[1].Previous)
		require.Equal(t, "gateway 502", seen[1].PreviousError)
		require.NotEqual(t, seen[0].Token, seen[1].Token)
		require.Equal(t, "orders", seen[0].Namespace)
	})
}

func fingerprint(t *testing.T, payload string) string {
	t.Helper()
	ex, err := idempotency.NewExtractor()
	require.NoError(t, err)
	id, err := ex.Extract(message.NewMessage("x", []byte(payload)))
	require.NoError(t, err)
	return id.Fingerprint
}

func TestStoreOutageNacksWithoutChargingAndBreakerPauses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		br, err := retry.NewBreaker(retry.WithWindow(10), retry.WithMinSamples(5), retry.WithCooldown(time.Second, 4*time.Second))
		require.NoError(t, err)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil },
			handler.WithBreaker(br))

		e.store.SetDown(true)
		for i := range 5 {
			_, err := h(delivery(fmt.Sprintf("order-%d", i), "pay"))
			require.ErrorIs(t, err, middleware.ErrStoreUnavailable)
		}
		require.Equal(t, retry.BreakerOpen, br.State(), "most attempts failed transiently: paused")
		claims := e.store.Calls("Claim")
		_, err = h(delivery("order-9", "pay"))
		require.ErrorIs(t, err, middleware.ErrPaused)
		require.Equal(t, claims, e.store.Calls("Claim"), "a paused delivery makes no attempt")
		require.EqualValues(t, 1, e.count(handler.OutcomePaused))

		e.store.SetDown(false)
		time.Sleep(time.Second) // cooldown: the next delivery is a probe
		for i := range 10 {
			deliverUntilAck(t, h, fmt.Sprintf("order-%d", i), "pay", 5)
		}
		require.Equal(t, retry.BreakerClosed, br.State())
		require.EqualValues(t, 10, calls.Load(), "all processed after the store returned")
		_, err = e.mem.Get(context.Background(), "orders", "order-0")
		require.NoError(t, err)
		require.Empty(t, e.dead.Published(deadTopic), "an outage floods nothing into the dead letter")
	})
}

func TestCanceledAttemptIsNotCharged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			<-msg.Context().Done()
			return nil, msg.Context().Err()
		}, handler.WithPolicy(mustPolicy(t, retry.WithMaxAttempts(1), retry.WithMaxInProcessTime(time.Second))))
		ctx, cancel := context.WithCancel(context.Background())
		msg := delivery("order-1", "pay 10")
		msg.SetContext(ctx)
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		_, err := h(msg)
		require.ErrorIs(t, err, context.Canceled)
		rec, err := e.mem.Get(context.Background(), "orders", "order-1")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateFailed, rec.State, "released, not exhausted")
		require.Equal(t, 1, rec.Canceled)
		require.EqualValues(t, 1, e.count(handler.OutcomeCanceled))
		require.Empty(t, e.dead.Published(deadTopic))
	})
}

func TestInProcessRetriesBackOffWithinBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var stamps []time.Time
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			stamps = append(stamps, time.Now())
			return nil, errors.New("timeout")
		}, handler.WithPolicy(mustPolicy(t, retry.WithMaxAttempts(10), retry.WithInProcessAttempts(4),
			retry.WithBackoff(100*time.Millisecond, time.Second), retry.WithMaxInProcessTime(3*time.Second))))
		start := time.Now()
		_, err := h(delivery("order-1", "pay 10"))
		require.ErrorContains(t, err, "timeout")
		require.Len(t, stamps, 4, "in-process attempts per delivery")
		for i := 1; i < len(stamps); i++ {
			gap := stamps[i].Sub(stamps[i-1])
			require.LessOrEqual(t, gap, 100*time.Millisecond<<(i-1), "equal jitter stays under the exponential cap")
		}
		require.LessOrEqual(t, time.Since(start), 3*time.Second+time.Second, "bounded by the in-process time (plus the delayed nack)")
		rec, err := e.mem.Get(context.Background(), "orders", "order-1")
		require.NoError(t, err)
		require.Equal(t, 4, rec.Attempts, "every in-process attempt is a durable attempt")
	})
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	noop := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	pub := faults.NewPublisher(0)
	cases := map[string][]handler.Option{
		"no store":       {handler.WithDeadLetter(pub, "dead")},
		"no dead letter": {handler.WithStore(mem, "orders")},
		"bad namespace":  {handler.WithStore(mem, "orders:v1"), handler.WithDeadLetter(pub, "dead")},
		"in-process time past the lease": {handler.WithStore(mem, "orders"), handler.WithDeadLetter(pub, "dead"),
			handler.WithLease(time.Second), handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(2*time.Second)))},
	}
	for name, opts := range cases {
		_, err := handler.New(noop, opts...)
		require.ErrorIs(t, err, handler.ErrInvalidOption, name)
	}
}

// fakeControl is a broker that can delay redeliveries and extend its lease.
type fakeControl struct {
	mu      sync.Mutex
	delays  []time.Duration
	extends int
}

func (c *fakeControl) NackAfter(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delays = append(c.delays, d)
	return true
}

func (c *fakeControl) Extend(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.extends++
	return nil
}

func TestBrokerControlDelaysNacksAndExtendsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			if string(msg.Payload) == "slow" {
				time.Sleep(2 * time.Second)
				return nil, nil
			}
			return nil, errors.New("timeout")
		}, handler.WithLease(600*time.Millisecond), handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(100*time.Millisecond))))

		ctl := &fakeControl{}
		msg := delivery("order-1", "fails")
		msg.SetContext(surelydelivery.WithControl(context.Background(), ctl))
		start := time.Now()
		_, err := h(msg)
		require.ErrorContains(t, err, "timeout")
		require.Zero(t, time.Since(start), "the broker delays the redelivery: no wait in the handler")
		require.Len(t, ctl.delays, 1)

		slow := delivery("order-2", "slow")
		slow.SetContext(surelydelivery.WithControl(context.Background(), ctl))
		_, err = h(slow)
		require.NoError(t, err)
		require.GreaterOrEqual(t, ctl.extends, 2, "the broker lease is extended with the store's")
		require.Equal(t, ctl.extends, e.store.Calls("Extend"))
	})
}

func TestUndecodableMessageIsDeadLetteredAsDecode(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
		bad := message.NewMessage("nats-ORDERS-7", []byte("raw \x00 bytes"))
		bad.Metadata.Set(surelydelivery.KeyDecodeError, "nats: header k has 2 values")
		_, err := h(bad)
		require.NoError(t, err, "acked after the dead letter")
		require.Zero(t, calls.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		require.Equal(t, string(dlq.ReasonDecode), dead[0].Metadata.Get(dlq.KeyReason))
		require.Equal(t, "raw \x00 bytes", string(dead[0].Payload))
		require.Contains(t, dead[0].Metadata.Get(dlq.KeyError), "2 values")
	})
}

type declinedError struct{ code string }

func (e *declinedError) Error() string { return "declined: " + e.code }

// A redelivery of an exhausted message is dead-lettered with the recorded
// cause's error types, not those of the "exhausted" error built from text.
func TestExhaustedRedeliveryKeepsTheCausesErrorTypes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		policy := mustPolicy(t, retry.WithMaxAttempts(1), retry.WithInProcessAttempts(1), retry.WithMaxInProcessTime(time.Second))
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			return nil, fmt.Errorf("charge: %w", &declinedError{code: "51"})
		}, handler.WithPolicy(policy))
		_, err := h(delivery("order-9", "pay 10"))
		require.Error(t, err, "a transient failure is nacked; the redelivery finds the budget spent")
		_, err = h(delivery("order-9", "pay 10"))
		require.NoError(t, err)
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		md := dead[0].Metadata
		require.Equal(t, string(dlq.ReasonExhausted), md.Get(dlq.KeyReason))
		require.Contains(t, md.Get(dlq.KeyErrorTypes), "*handler_test.declinedError")
	})
}
