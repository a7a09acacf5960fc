package bench

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	wmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

const (
	// topic is where the benchmark publishes; deadTopic and poisonTopic
	// receive final failures (none on the measured path).
	topic       = "bench.orders"
	deadTopic   = "dead"
	poisonTopic = "poison"
	namespace   = "bench"

	// window bounds the messages published but not yet processed, so that
	// GoChannel (one goroutine pair per published message) does not hold
	// b.N goroutines at once. The router processes up to window messages
	// concurrently.
	window = 64

	// chunk is how many messages BenchmarkChain builds at a time, outside
	// the timer.
	chunk = 4096

	// drainTimeout bounds the wait for the last message of a run.
	drainTimeout = 2 * time.Minute
)

// counter returns the business handler of every benchmark: it does nothing
// but count its calls, so a run can check that no message was dropped as a
// duplicate.
func counter() (message.HandlerFunc, *atomic.Int64) {
	var calls atomic.Int64
	return func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, nil
	}, &calls
}

// chainFunc wraps the business handler fn in the chain under test. ps is
// the run's GoChannel, for the dead-letter step.
type chainFunc func(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc

func bare(_ *testing.B, _ *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	return fn
}

// watermillChain is Watermill's own answer: PoisonQueue outermost, then
// Retry, then Deduplicator, in the order surely uses for the same steps.
//
// The Deduplicator keys on the idempotency_key metadata, like surely, with
// its default in-memory repository (one-minute window). Its default key
// factory would not do: Adler-32 of the payload collides for about 98% of
// these short payloads (the messages would be dropped as duplicates and the
// handler never run), and it allocates a 32 KiB copy buffer per message
// (io.CopyN into a hash).
//
// The default repository starts a goroutine on context.Background() that
// has no Close: each run leaves one goroutine parked on a ticker. That is
// Watermill's, and only this variant has it.
func watermillChain(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	poison, err := wmw.PoisonQueue(ps, poisonTopic)
	if err != nil {
		b.Fatal(err)
	}
	retry := wmw.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2}
	dedup := &wmw.Deduplicator{KeyFactory: wmw.NewMessageHasherFromMetadataField(idempotency.DefaultMetadataKey)}
	return poison(retry.Middleware(dedup.Middleware(fn)))
}

func surelyChain(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc, store idempotency.Store) message.HandlerFunc {
	h, err := handler.New(fn,
		handler.WithStore(store, namespace),
		handler.WithDeadLetter(ps, deadTopic),
	)
	if err != nil {
		b.Fatal(err)
	}
	return h
}

func surelyMemstore(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	store, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	return surelyChain(b, ps, fn, store)
}

// nullStore acquires every claim and accepts every Complete without keeping
// anything: it is not a store, only a way to measure surely's middleware
// without a store's own cost (BenchmarkChain/surely_nullstore).
type nullStore struct{}

func (nullStore) Claim(_ context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	return idempotency.ClaimResult{Status: idempotency.Acquired, Lease: idempotency.Lease{
		Namespace: req.Namespace, Key: req.Key, Token: "1", Attempt: 1,
	}}, nil
}

func (nullStore) Complete(context.Context, idempotency.Lease, idempotency.Outcome) error { return nil }

func (nullStore) Release(context.Context, idempotency.Lease, idempotency.Failure) error { return nil }

func (nullStore) Extend(_ context.Context, l idempotency.Lease, _ time.Duration) (idempotency.Lease, error) {
	return l, nil
}

func (nullStore) Get(context.Context, string, string) (idempotency.Record, error) {
	return idempotency.Record{}, idempotency.ErrNotFound
}

func surelyNullstore(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	return surelyChain(b, ps, fn, nullStore{})
}

// surelyRedis uses the Redis of SURELY_REDIS_URL (skipped without it) with a
// key prefix of its own, and deletes its keys (SCAN + DEL) when the run
// ends. It never flushes the server.
func surelyRedis(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	return surelyRedisWith(b, ps, fn)
}

// surelyRedisBatched is surelyRedis with redisstore.WithBatching(64).
func surelyRedisBatched(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc) message.HandlerFunc {
	return surelyRedisWith(b, ps, fn, redisstore.WithBatching(storeBatch))
}

func surelyRedisWith(b *testing.B, ps *gochannel.GoChannel, fn message.HandlerFunc, opts ...idempotency.Option) message.HandlerFunc {
	client := testenv.Redis(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := "surely-bench:" + watermill.NewShortUUID() + ":"
	store, err := redisstore.New(ctx, client, append([]idempotency.Option{redisstore.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	// Registered after testenv.Redis's cleanup, so it runs before the
	// client is closed.
	b.Cleanup(func() {
		if err := deleteKeys(client, prefix); err != nil {
			b.Errorf("delete %s* keys: %v", prefix, err)
		}
	})
	warmPool(ctx, b, client)
	return surelyChain(b, ps, fn, store)
}

// warmPool opens the client's connections before the timer starts, so the
// measured run does not pay for dialing.
func warmPool(ctx context.Context, b *testing.B, client *redis.Client) {
	n := min(client.Options().PoolSize, window)
	errs := make(chan error, n)
	for range n {
		go func() { errs <- client.Ping(ctx).Err() }()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

func deleteKeys(client *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// newMessage builds message i of run, with a unique idempotency_key and a
// unique payload: no message is a duplicate or a conflict in any variant.
func newMessage(run string, i int) *message.Message {
	key := run + "-" + strconv.Itoa(i)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"`+key+`","amount":4200}`))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	return msg
}

type variant struct {
	name  string
	chain chainFunc
}

var variants = []variant{
	{"bare", bare},
	{"watermill_chain", watermillChain},
	{"surely_memstore", surelyMemstore},
	{"surely_redis", surelyRedis},
	{"surely_redis_batched", surelyRedisBatched},
	{"surely_sqlite_inbox", surelySQLiteInbox},
	{"surely_sqlite_inbox_syncfull", surelySQLiteInboxFull},
}

// chainVariants adds surely_nullstore, a diagnostic, to BenchmarkChain.
var chainVariants = []variant{
	{"bare", bare},
	{"watermill_chain", watermillChain},
	{"surely_nullstore", surelyNullstore},
	{"surely_memstore", surelyMemstore},
	{"surely_redis", surelyRedis},
}

// BenchmarkRouter measures one message end to end through a GoChannel and a
// message.Router: publish, delivery, the chain, ack. See the package doc.
//
// x_bare is the variant's ns/op divided by bare's from the same run (2
// means twice the time per message).
func BenchmarkRouter(b *testing.B) {
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			runRouter(b, v.chain)
			if v.name == "bare" {
				setBaseline(b, "router")
			} else {
				reportRatio(b, "router", "x_bare")
			}
		})
	}
}

func runRouter(b *testing.B, chain chainFunc) {
	b.ReportAllocs()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = ps.Close() }()
	fn, calls := counter()
	h := chain(b, ps, fn)

	run := watermill.NewShortUUID()
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		msgs[i] = newMessage(run, i)
	}

	var (
		processed atomic.Int64
		failures  atomic.Int64
		firstErr  error
		errOnce   sync.Once
		slots     = make(chan struct{}, window)
		done      = make(chan struct{})
		want      = int64(b.N)
	)
	// counted is the same outermost wrapper for every variant: a delivery
	// counts when the whole chain returned nil (for surely: after
	// Complete), just before the router acks it.
	counted := func(msg *message.Message) error {
		if _, err := h(msg); err != nil {
			failures.Add(1)
			errOnce.Do(func() { firstErr = err })
			return err // nacked: GoChannel redelivers it
		}
		<-slots
		if processed.Add(1) == want {
			close(done)
		}
		return nil
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	router.AddConsumerHandler("bench", topic, ps, counted)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	defer func() {
		if err := router.Close(); err != nil {
			b.Errorf("close router: %v", err)
		}
		cancel()
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			b.Errorf("router run: %v", err)
		}
	}()
	select {
	case <-router.Running():
	case err := <-runErr:
		b.Fatalf("router stopped before running: %v", err)
	}

	b.ResetTimer()
	for _, msg := range msgs {
		slots <- struct{}{}
		if err := ps.Publish(topic, msg); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(drainTimeout):
		b.Fatalf("%d of %d messages processed after %v; %d failed deliveries, first: %v",
			processed.Load(), want, drainTimeout, failures.Load(), firstError(&errOnce, &firstErr))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	checkCalls(b, calls)
	if n := failures.Load(); n > 0 {
		b.Errorf("%d deliveries failed (and were redelivered); first: %v", n, firstError(&errOnce, &firstErr))
	}
}

// firstError reads the error recorded by errOnce once no handler can still
// be recording it.
func firstError(once *sync.Once, err *error) error {
	once.Do(func() {})
	return *err
}

// BenchmarkChain measures the assembled message.HandlerFunc alone, called
// directly on pre-built messages: no broker, no router, no goroutines.
// surely_nullstore (this benchmark only) is surely's middleware on a store
// that does nothing, separating the middleware's cost from the store's.
func BenchmarkChain(b *testing.B) {
	for _, v := range chainVariants {
		b.Run(v.name, func(b *testing.B) { runChain(b, v.chain, v.name == "bare") })
	}
}

func runChain(b *testing.B, chain chainFunc, reuse bool) {
	b.ReportAllocs()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = ps.Close() }()
	fn, calls := counter()
	h := chain(b, ps, fn)
	run := watermill.NewShortUUID()

	if reuse {
		// bare is a plain call that keeps no state: one message serves every
		// iteration. Building b.N messages for a 2 ns call would cost
		// minutes outside the timer.
		msg := newMessage(run, 0)
		b.ResetTimer()
		for range b.N {
			if _, err := h(msg); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		checkCalls(b, calls)
		return
	}

	msgs := make([]*message.Message, min(chunk, b.N))
	b.ResetTimer()
	for i := 0; i < b.N; i += len(msgs) {
		b.StopTimer()
		batch := msgs[:min(len(msgs), b.N-i)]
		for j := range batch {
			batch[j] = newMessage(run, i+j)
		}
		b.StartTimer()
		for _, msg := range batch {
			if _, err := h(msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	checkCalls(b, calls)
}

// checkCalls fails the run unless the business handler ran once per
// message: a chain that dropped messages would measure something else.
func checkCalls(b *testing.B, calls *atomic.Int64) {
	if n := calls.Load(); n != int64(b.N) {
		b.Errorf("the handler ran %d times for %d messages", n, b.N)
	}
}
