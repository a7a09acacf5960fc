package handler_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/adapters/gochannel"
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

// The poison-message table (docs/POISON.md): one class of bad input per
// row, each sent through handler.New on a real Watermill router reading a
// GoChannel topic, with a memstore store, under testing/synctest (leases,
// backoff and the dead-letter retry wait run on the bubble's fake clock).
// Every row ends the same way: the poison message is dead-lettered once
// with its reason, its payload byte for byte and its metadata as it came;
// the chain returns nil (the router acks) only on its last delivery, after
// that publish; a good message published after it is then processed
// exactly once (the consumer is still consuming); and nothing is lost
// (every published message is either processed or dead-lettered).

const (
	poisonTopic = "orders"
	poisonDead  = "orders_dead"
)

// poisonCase is one class of bad input.
type poisonCase struct {
	name string
	// msg builds the poison message (fresh per row).
	msg func() *message.Message
	// before are messages delivered, and processed, before the poison one.
	before []*message.Message
	// fn is the business handler for the poison message (the good message
	// always succeeds). nil: succeed.
	fn func(msg *message.Message) error
	// opts are extra handler.New options.
	opts []handler.Option
	// deadFailFirst fails the first n dead-letter publishes.
	deadFailFirst int
	reason        dlq.Reason
	// runs is how many times the handler must run the poison message.
	runs int
	// attempts is the durable attempt count written to the dead letter.
	attempts string
	// errContains must be in surely_error.
	errContains string
	// check runs extra assertions on the dead letter.
	check func(t *testing.T, r *poisonRun, dead *message.Message)
}

// poisonRun is one row's router, store and observations.
type poisonRun struct {
	mem        idempotency.Store
	mu         sync.Mutex
	runs       map[string]int         // handler runs per message UUID
	processed  map[string]int         // successful runs per message UUID
	deliveries map[string][]time.Time // chain entries per message UUID
	acked      map[string][]bool      // per delivery: the chain returned nil (the router acks)
	outcomes   map[handler.Outcome]int
}

func (r *poisonRun) snapshot(uuid string) (runs, processed int, deliveries []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[uuid], r.processed[uuid], append([]time.Time(nil), r.deliveries[uuid]...)
}

// flakyDead is a dead-letter publisher that fails its first n publishes,
// then publishes to the GoChannel.
type flakyDead struct {
	message.Publisher
	mu sync.Mutex
	n  int
}

func (p *flakyDead) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	fail := p.n > 0
	p.n--
	p.mu.Unlock()
	if fail {
		return faults.ErrInjected
	}
	return p.Publisher.Publish(topic, msgs...)
}

func keyed(key, payload string, md ...string) func() *message.Message {
	return func() *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(payload))
		if key != "" {
			m.Metadata.Set(idempotency.DefaultMetadataKey, key)
		}
		for i := 0; i+1 < len(md); i += 2 {
			m.Metadata.Set(md[i], md[i+1])
		}
		return m
	}
}

func poisonCases(t *testing.T) []poisonCase {
	onlyMetadata, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	require.NoError(t, err)
	jsonField, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromJSONField("order_id")))
	require.NoError(t, err)
	strictKeys := handler.WithIdentity(onlyMetadata, handler.RejectMissingKey)
	// Raw bytes that are neither UTF-8 nor JSON, with every byte value.
	raw := make([]byte, 256)
	for i := range raw {
		raw[i] = byte(i)
	}
	huge := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), (4<<20)/18) // ~4 MiB
	permanent := func(*message.Message) error { return retry.Permanent(errors.New("card declined")) }

	return []poisonCase{
		{
			name: "undecodable payload",
			msg: func() *message.Message {
				// As adapters/amqp marks a body its unmarshaler refused.
				m := message.NewMessage("amqp-5f0c", raw)
				m.Metadata.Set(surelydelivery.KeyDecodeError, "unmarshaler panicked: proto: cannot parse invalid wire-format data")
				return m
			},
			reason: dlq.ReasonDecode, runs: 0, attempts: "0", errContains: "invalid wire-format",
		},
		{
			name: "undecodable headers",
			msg: func() *message.Message {
				// As adapters/nats marks a message with a repeated header.
				m := message.NewMessage("nats-ORDERS-42", []byte(`{"order_id":"o-1"}`))
				m.Metadata.Set(surelydelivery.KeyDecodeError, `multiple values received in NATS header for "tenant": ([a b])`)
				m.Metadata.Set("surely_decode_headers", `{"tenant":["a","b"]}`)
				return m
			},
			reason: dlq.ReasonDecode, runs: 0, attempts: "0", errContains: "multiple values",
			check: func(t *testing.T, _ *poisonRun, dead *message.Message) {
				require.JSONEq(t, `{"tenant":["a","b"]}`, dead.Metadata.Get("surely_decode_headers"), "the raw headers travel")
			},
		},
		{
			name: "missing key", msg: keyed("", "pay 10", "tenant", "acme"), opts: []handler.Option{strictKeys},
			reason: dlq.ReasonNoKey, runs: 0, attempts: "0", errContains: "no operation key",
		},
		{
			name: "oversized key", msg: keyed(strings.Repeat("k", defaults.MaxKeyLen+1), "pay 10"),
			reason: dlq.ReasonNoKey, runs: 0, attempts: "0", errContains: "the limit is 512",
		},
		{
			name: "key with control bytes", msg: keyed("order\x00-1\r\n", "pay 10"),
			reason: dlq.ReasonNoKey, runs: 0, attempts: "0", errContains: "control character",
		},
		{
			name: "key not UTF-8", msg: keyed("order-\xff\xfe", "pay 10"),
			reason: dlq.ReasonNoKey, runs: 0, attempts: "0", errContains: "not valid UTF-8",
		},
		{
			name: "payload not JSON for a JSON key field", msg: keyed("", "\xff{not json"),
			opts:   []handler.Option{handler.WithIdentity(jsonField, handler.RejectMissingKey)},
			reason: dlq.ReasonNoKey, runs: 0, attempts: "0", errContains: "not a JSON object",
		},
		{
			name:   "same key, different payload",
			before: []*message.Message{keyed("order-1", "pay 10")()},
			msg:    keyed("order-1", "pay 9999", "tenant", "acme"),
			reason: dlq.ReasonConflict, runs: 0, attempts: "0", errContains: "different payload",
			check: func(t *testing.T, r *poisonRun, _ *message.Message) {
				rec, err := r.mem.Get(t.Context(), "orders", "order-1")
				require.NoError(t, err)
				require.Equal(t, idempotency.StateDone, rec.State, "the first payload's record is untouched")
			},
		},
		{
			name: "handler panic", msg: keyed("order-1", "pay 10"),
			fn:     func(*message.Message) error { panic("nil map write") },
			reason: dlq.ReasonPanic, runs: 3, attempts: "3", errContains: "nil map write",
			check: func(t *testing.T, _ *poisonRun, dead *message.Message) {
				hist, err := envelope.ParseHistory(dead.Metadata.Get(dlq.KeyHistory))
				require.NoError(t, err)
				require.Len(t, hist, 3)
				require.Contains(t, hist[2].Stack, "goroutine", "the panic's stack is kept")
			},
		},
		{
			name: "handler never returns", msg: keyed("order-1", "pay 10"),
			fn: func(msg *message.Message) error {
				<-msg.Context().Done() // hangs until the lease bound cancels it
				return msg.Context().Err()
			},
			reason: dlq.ReasonExhausted, runs: 3, attempts: "3", errContains: "after 3 attempts",
			check: func(t *testing.T, r *poisonRun, dead *message.Message) {
				hist, err := envelope.ParseHistory(dead.Metadata.Get(dlq.KeyHistory))
				require.NoError(t, err)
				require.Len(t, hist, 3)
				for _, h := range hist {
					require.Equal(t, idempotency.ResultFailed, h.Result, "a hung attempt is a charged failure, not a shutdown")
					require.Contains(t, h.Error, "longest lease hold")
				}
				// Each attempt was held for the longest hold (10 leases of
				// 5s, canceled at the first extension past 9 leases).
				_, _, at := r.snapshot(dead.Metadata.Get(dlq.KeyOriginalUUID))
				require.Len(t, at, 4, "3 hung attempts, then the exhausted claim")
				for i := 1; i < 3; i++ {
					require.GreaterOrEqual(t, at[i].Sub(at[i-1]), 45*time.Second)
				}
			},
		},
		{
			name: "permanent error", msg: keyed("order-1", "pay 10", "tenant", "acme"), fn: permanent,
			reason: dlq.ReasonPermanent, runs: 1, attempts: "1", errContains: "card declined",
		},
		{
			name: "retries exhausted", msg: keyed("order-1", "pay 10"),
			fn:     func(*message.Message) error { return errors.New("inventory service: 503") },
			reason: dlq.ReasonExhausted, runs: 3, attempts: "3", errContains: "inventory service: 503",
		},
		{
			name: "dead-letter publish failing", msg: keyed("order-1", "pay 10"), fn: permanent, deadFailFirst: 2,
			reason: dlq.ReasonPermanent, runs: 1, attempts: "1", errContains: "card declined",
			check: func(t *testing.T, r *poisonRun, dead *message.Message) {
				_, _, at := r.snapshot(dead.Metadata.Get(dlq.KeyOriginalUUID))
				require.Len(t, at, 3, "two nacks, then the publish that worked")
				for i := 1; i < len(at); i++ {
					require.GreaterOrEqual(t, at[i].Sub(at[i-1]), defaults.DeadLetterRetryWait,
						"the nacks are spaced: a broken dead letter does not spin")
				}
				r.mu.Lock()
				defer r.mu.Unlock()
				require.Equal(t, 2, r.outcomes[handler.OutcomeDeadLetterFailed])
			},
		},
		{
			name: "huge payload", msg: func() *message.Message { m := keyed("order-1", "")(); m.Payload = huge; return m }, fn: permanent,
			reason: dlq.ReasonPermanent, runs: 1, attempts: "1", errContains: "card declined",
		},
		{
			name: "metadata not UTF-8", msg: keyed("order-1", "pay 10", "tenant\xff", "\xc3\x28acme\x00", "trace", strings.Repeat("\xfe", 1024)),
			fn:     permanent,
			reason: dlq.ReasonPermanent, runs: 1, attempts: "1", errContains: "card declined",
		},
		{
			name: "forged surely_ metadata", msg: keyed("order-1", "pay 10", dlq.KeyReason, "conflict", dlq.KeyAttempts, "999"),
			fn:     func(*message.Message) error { return errors.New("inventory service: 503") },
			reason: dlq.ReasonExhausted, runs: 3, attempts: "3", errContains: "inventory service: 503",
		},
	}
}

func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range poisonCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { runPoison(t, tc) })
		})
	}
}

func runPoison(t *testing.T, tc poisonCase) {
	pubSub, err := gochannel.New()
	require.NoError(t, err)
	mem, err := memstore.New()
	require.NoError(t, err)
	r := &poisonRun{
		mem: mem, runs: map[string]int{}, processed: map[string]int{},
		deliveries: map[string][]time.Time{}, acked: map[string][]bool{}, outcomes: map[handler.Outcome]int{},
	}
	poison := tc.msg()
	sent := poison.Copy() // what the producer sent, to compare the dead letter with
	fn := tc.fn
	if fn == nil {
		fn = func(*message.Message) error { return nil }
	}
	business := func(msg *message.Message) ([]*message.Message, error) {
		r.mu.Lock()
		r.runs[msg.UUID]++
		r.mu.Unlock()
		var err error
		if msg.UUID == poison.UUID {
			err = fn(msg)
		}
		if err == nil {
			r.mu.Lock()
			r.processed[msg.UUID]++
			r.mu.Unlock()
		}
		return nil, err
	}
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(time.Second))
	require.NoError(t, err)
	opts := append([]handler.Option{
		handler.WithStore(mem, "orders"),
		handler.WithDeadLetter(&flakyDead{Publisher: pubSub, n: tc.deadFailFirst}, poisonDead),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(5 * time.Second),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			r.mu.Lock()
			r.outcomes[p.Outcome]++
			r.mu.Unlock()
			return handler.OutcomeResult{}
		}),
	}, tc.opts...)
	h, err := handler.New(business, opts...)
	require.NoError(t, err)

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	// Outermost: record every delivery the chain gets.
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			r.mu.Lock()
			r.deliveries[msg.UUID] = append(r.deliveries[msg.UUID], time.Now())
			r.mu.Unlock()
			msgs, err := next(msg)
			r.mu.Lock()
			r.acked[msg.UUID] = append(r.acked[msg.UUID], err == nil)
			r.mu.Unlock()
			return msgs, err
		}
	})
	router.AddConsumerHandler("orders-handler", poisonTopic, pubSub, handler.NoPublish(h))
	deadCh, err := pubSub.Subscribe(t.Context(), poisonDead)
	require.NoError(t, err)
	var deadMu sync.Mutex
	var dead []*message.Message
	deadDone := make(chan struct{})
	go func() {
		defer close(deadDone)
		for d := range deadCh {
			deadMu.Lock()
			dead = append(dead, d)
			deadMu.Unlock()
			d.Ack()
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()

	good := keyed("good-1", `{"order_id":"good-1"}`)()
	all := append(append([]*message.Message{}, tc.before...), poison, good)
	// waitFor polls cond on the fake clock, for at most a (fake) hour.
	waitFor := func(what string, cond func() bool) {
		for deadline := time.Now().Add(time.Hour); !cond(); time.Sleep(10 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "no %s after an hour", what)
		}
	}
	for _, m := range tc.before {
		require.NoError(t, pubSub.Publish(poisonTopic, m))
		waitFor("processing of an earlier message", func() bool { _, ok, _ := r.snapshot(m.UUID); return ok > 0 })
	}
	require.NoError(t, pubSub.Publish(poisonTopic, poison))
	waitFor("dead letter", func() bool { deadMu.Lock(); defer deadMu.Unlock(); return len(dead) > 0 })
	// The consumer goes on: a message published after the poison one.
	require.NoError(t, pubSub.Publish(poisonTopic, good))
	waitFor("processing of the good message", func() bool { _, ok, _ := r.snapshot(good.UUID); return ok > 0 })
	synctest.Wait()
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, pubSub.Close())
	<-deadDone

	// Dead-lettered once, with its reason, payload and metadata intact.
	require.Len(t, dead, 1)
	d := dead[0]
	md := d.Metadata
	require.Equal(t, string(tc.reason), md.Get(dlq.KeyReason), "reason; error: %s", md.Get(dlq.KeyError))
	require.True(t, bytes.Equal(sent.Payload, d.Payload), "payload byte for byte")
	for k, v := range sent.Metadata {
		if !strings.HasPrefix(k, "surely_") || k == surelydelivery.KeyDecodeError || k == "surely_decode_headers" {
			require.Equal(t, v, md.Get(k), "metadata %q byte for byte", k)
		}
	}
	require.Equal(t, envelope.DeadLetterUUID(sent.UUID), d.UUID)
	require.Equal(t, sent.UUID, md.Get(dlq.KeyOriginalUUID))
	require.Equal(t, poisonTopic, md.Get(dlq.KeyOriginalTopic))
	require.Equal(t, "orders-handler", md.Get(dlq.KeyHandler))
	require.Equal(t, tc.attempts, md.Get(dlq.KeyAttempts))
	require.Contains(t, md.Get(dlq.KeyError), tc.errContains)
	runs, processed, _ := r.snapshot(sent.UUID)
	require.Equal(t, tc.runs, runs, "handler runs of the poison message")
	require.Zero(t, processed, "the poison message never succeeded")

	// The consumer kept consuming, and nothing was lost.
	for _, m := range all {
		_, processed, _ := r.snapshot(m.UUID)
		if m.UUID == sent.UUID {
			continue
		}
		require.Equal(t, 1, processed, "message %s processed once", m.UUID)
	}
	r.mu.Lock()
	acks := r.acked[sent.UUID]
	require.NotEmpty(t, acks)
	require.True(t, acks[len(acks)-1], "the poison message is acked, after its dead letter was published")
	require.NotContains(t, acks[:len(acks)-1], true, "and not before")
	require.Equal(t, 1, r.outcomes[handler.OutcomeDeadLettered])
	require.Equal(t, 1+len(tc.before), r.outcomes[handler.OutcomeProcessed])
	r.mu.Unlock()
	if tc.check != nil {
		tc.check(t, r, d)
	}
}

// TestStaleOwnersPermanentErrorIsNotDeadLettered is the trace the protocol
// model (docs/model) found: consumer A claims the operation, its lease
// expires while it works, consumer B claims it and completes it; then A's
// handler fails permanently. A's Release finds the lease lost. A stale
// owner does not decide the record: its delivery is nacked (LeaseLostError,
// outcome lease_lost), not dead-lettered and acked, and its redelivery is
// acked as a duplicate of B's completed operation.
func TestStaleOwnersPermanentErrorIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		skew := time.Duration(0) // the store's clock runs ahead of the bubble's by skew
		mem, err := memstore.New(idempotency.WithClock(func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return time.Now().Add(skew)
		}))
		require.NoError(t, err)
		dead := faults.NewPublisher(0)
		var calls sync.WaitGroup
		calls.Add(1)
		releaseA := make(chan struct{})
		var n int
		var outcomes []handler.Outcome
		h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
			mu.Lock()
			n++
			me := n
			mu.Unlock()
			if me == 1 { // A: works past its lease, then fails for good
				calls.Done()
				<-releaseA
				return nil, retry.Permanent(errors.New("card declined"))
			}
			return nil, nil // B
		},
			handler.WithStore(mem, "orders"),
			handler.WithDeadLetter(dead, poisonDead),
			handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(time.Second))),
			handler.WithBreaker(nil),
			handler.WithLease(5*time.Second),
			handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
				mu.Lock()
				outcomes = append(outcomes, p.Outcome)
				mu.Unlock()
				return handler.OutcomeResult{}
			}),
		)
		require.NoError(t, err)

		src := keyed("order-1", "pay 10")()
		errA := make(chan error, 1)
		go func() { _, err := h(src.Copy()); errA <- err }()
		calls.Wait()
		mu.Lock()
		skew = time.Minute // A's lease has expired in the store
		mu.Unlock()
		_, err = h(src.Copy()) // B takes the operation over and completes it
		require.NoError(t, err)
		rec, err := mem.Get(t.Context(), "orders", "order-1")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateDone, rec.State)

		close(releaseA)
		err = <-errA
		var ll *middleware.LeaseLostError
		require.ErrorAs(t, err, &ll, "A's stale verdict is nacked")
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		require.False(t, retry.IsPermanent(err), "and not classified permanent")
		require.Empty(t, dead.Published(poisonDead), "no dead letter for an operation B completed")

		_, err = h(src.Copy()) // A's delivery comes back: a duplicate
		require.NoError(t, err)
		require.Empty(t, dead.Published(poisonDead))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []handler.Outcome{handler.OutcomeProcessed, handler.OutcomeLeaseLost, handler.OutcomeDuplicate}, outcomes)
	})
}

// TestHandlerContextAfterTheAttempt: the handler's context (which the
// chain cancels when the attempt is hung) keeps the message context's
// deadline, follows its cancellation while the handler runs, and is not
// canceled when the handler returns, so a produced message that carries it
// can still be published (watermill-redisstream publishes with it).
func TestHandlerContextAfterTheAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			out := message.NewMessage(watermill.NewUUID(), []byte("charged"))
			out.SetContext(msg.Context())
			return []*message.Message{out}, nil
		})
		deadline := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(t.Context(), deadline)
		defer cancel()
		src := delivery("order-1", "pay 10")
		src.SetContext(ctx)
		out, err := h(src)
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.NoError(t, out[0].Context().Err(), "a produced message's context outlives the attempt")
		got, ok := out[0].Context().Deadline()
		require.True(t, ok)
		require.Equal(t, deadline, got, "the message context's deadline is kept")

		// A shutdown while the handler runs cancels it (not charged).
		started := make(chan struct{})
		h = e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			close(started)
			<-msg.Context().Done()
			return nil, msg.Context().Err()
		})
		ctx2, cancel2 := context.WithCancel(t.Context())
		src = delivery("order-2", "pay 20")
		src.SetContext(ctx2)
		errc := make(chan error, 1)
		go func() { _, err := h(src); errc <- err }()
		<-started
		cancel2()
		require.ErrorIs(t, <-errc, context.Canceled)
		rec, err := e.mem.Get(t.Context(), "orders", "order-2")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateFailed, rec.State)
		require.Equal(t, idempotency.ResultCanceled, rec.History[len(rec.History)-1].Result, "a shutdown is not a failure")
	})
}
