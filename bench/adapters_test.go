package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	surelygochannel "github.com/surely-dev/surely/adapters/gochannel"
	surelynats "github.com/surely-dev/surely/adapters/nats"
	surelyredis "github.com/surely-dev/surely/adapters/redisstream"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testamqp"
	"github.com/surely-dev/surely/internal/testbroker"
	"github.com/surely-dev/surely/internal/testenv"
)

// adapterConcurrency is the Concurrency (messages in flight) of the
// adapters that have one (NATS, RabbitMQ). Redis Streams hands out one
// entry at a time per subscription; the persistent GoChannel hands every
// message published before the subscription out at once, each in a
// goroutine of its own.
const adapterConcurrency = 16

// adapterTimeout bounds the wait for the last message of a run.
const adapterTimeout = 30 * time.Second

// adapterRun is one run's broker side: a fresh topic, a publisher and a
// subscriber of it, all removed when the run ends.
type adapterRun struct {
	topic string
	pub   message.Publisher
	sub   message.Subscriber
}

// broker prepares what its runs share (a server, an admin connection) and
// returns the function that makes each run's topic, publisher and
// subscriber. It skips b when the broker is unavailable.
type broker struct {
	name string
	open func(b *testing.B) func(b *testing.B) adapterRun
}

var brokers = []broker{
	{"gochannel", openGoChannel},
	{"nats_embedded", openNATS},
	{"redisstream", openRedisStream},
	{"amqp", openAMQP},
}

// adapterVariant wraps the counting handler: bare, or handler.New with the
// Redis store (dead letters to an in-process GoChannel, never used on the
// measured path).
type adapterVariant struct {
	name string
	wrap func(b *testing.B, fn message.HandlerFunc) message.HandlerFunc
}

var adapterVariants = []adapterVariant{
	{"bare", func(_ *testing.B, fn message.HandlerFunc) message.HandlerFunc { return fn }},
	{"surely_redis", func(b *testing.B, fn message.HandlerFunc) message.HandlerFunc {
		return surelyRedisWith(b, deadLetters(b), fn)
	}},
	{"surely_redis_batched", func(b *testing.B, fn message.HandlerFunc) message.HandlerFunc {
		return surelyRedisWith(b, deadLetters(b), fn, redisstore.WithBatching(storeBatch))
	}},
}

func deadLetters(b *testing.B) *gochannel.GoChannel {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	b.Cleanup(func() { _ = ps.Close() })
	return ps
}

// BenchmarkAdapters measures consuming through surely's broker adapters
// and a message.Router: the bare subscriber and handler against the same
// with handler.New and the Redis store. Each run publishes b.N messages
// first (not measured), then starts the router; ns/msg is the time from
// the first delivery to the last processed message, divided by b.N (the
// framework's ns/op also covers subscribing). pct_of_bare is bare's ns/msg
// over the variant's, times 100, from the same run: the share of bare
// throughput kept. Use a fixed -benchtime (e.g. 2000x): every run
// republishes its messages.
func BenchmarkAdapters(b *testing.B) {
	for _, br := range brokers {
		b.Run(br.name, func(b *testing.B) {
			newRun := br.open(b)
			group := "adapters/" + br.name
			for _, v := range adapterVariants {
				b.Run(v.name, func(b *testing.B) {
					perMsg := runAdapter(b, newRun, v, 0)
					if v.name == "bare" {
						baselines.Store(group, perMsg)
					} else if base, ok := baselines.Load(group); ok {
						b.ReportMetric(100*base.(float64)/perMsg, "pct_of_bare")
					}
				})
			}
		})
	}
}

// slowHandler is the business handler's time in BenchmarkAdaptersSlow: a
// handler that does some I/O.
const slowHandler = time.Millisecond

// slowBrokers are the brokers of BenchmarkAdaptersSlow: those whose
// adapter has a Concurrency, so adapterConcurrency handlers overlap.
var slowBrokers = []broker{
	{"nats_embedded", openNATS},
	{"amqp", openAMQP},
}

// BenchmarkAdaptersSlow is BenchmarkAdapters with a business handler that
// sleeps slowHandler (1 ms) before counting, at adapterConcurrency (16)
// messages in flight, without the batched variant: surely's share is its
// store round trips and its CPU per message next to a handler that waits.
// pct_of_bare is bare's ns/msg over surely's from the same run (bare's
// ceiling is 16 messages per ms). Use a fixed -benchtime (e.g. 2000x).
func BenchmarkAdaptersSlow(b *testing.B) {
	for _, br := range slowBrokers {
		b.Run(br.name, func(b *testing.B) {
			newRun := br.open(b)
			group := "adapters_slow/" + br.name
			for _, v := range adapterVariants[:2] {
				b.Run(v.name, func(b *testing.B) {
					perMsg := runAdapter(b, newRun, v, slowHandler)
					if v.name == "bare" {
						baselines.Store(group, perMsg)
					} else if base, ok := baselines.Load(group); ok {
						b.ReportMetric(100*base.(float64)/perMsg, "pct_of_bare")
					}
				})
			}
		})
	}
}

// runAdapter runs one measurement, with a business handler that sleeps
// work first (none when 0), and returns its ns per message.
func runAdapter(b *testing.B, newRun func(b *testing.B) adapterRun, v adapterVariant, work time.Duration) float64 {
	b.StopTimer()
	b.ReportAllocs()
	r := newRun(b)
	fn, calls := counter()
	if work > 0 {
		count := fn
		fn = func(msg *message.Message) ([]*message.Message, error) {
			time.Sleep(work)
			return count(msg)
		}
	}
	h := v.wrap(b, fn)

	run := watermill.NewShortUUID()
	publish(b, r, run)

	var (
		processed atomic.Int64
		started   atomic.Int64 // UnixNano of the first delivery
		finished  time.Time
		want      = int64(b.N)
		done      = make(chan struct{})
		failures  atomic.Int64
	)
	counted := func(msg *message.Message) ([]*message.Message, error) {
		started.CompareAndSwap(0, time.Now().UnixNano())
		out, err := h(msg)
		if err != nil {
			failures.Add(1)
			return nil, err
		}
		if processed.Add(1) == want {
			finished = time.Now()
			close(done)
		}
		return out, nil
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	router.AddConsumerHandler("bench", r.topic, r.sub, message.NoPublishHandlerFunc(func(msg *message.Message) error {
		_, err := counted(msg)
		return err
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	cpu0 := processCPU(b)
	b.StartTimer()
	go func() { runErr <- router.Run(ctx) }()
	select {
	case <-done:
		if cpu0 >= 0 {
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu_ns/msg")
		}
	case err := <-runErr:
		b.Fatalf("router stopped: %v", err)
	case <-time.After(adapterTimeout):
		b.Fatalf("%d of %d messages processed after %v; %d failed deliveries", processed.Load(), want, adapterTimeout, failures.Load())
	}
	b.StopTimer()
	if err := router.Close(); err != nil {
		b.Errorf("close router: %v", err)
	}
	cancel()
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
		b.Errorf("router run: %v", err)
	}
	checkCalls(b, calls)
	if n := failures.Load(); n > 0 {
		b.Errorf("%d deliveries failed", n)
	}
	perMsg := float64(finished.UnixNano()-started.Load()) / float64(b.N)
	b.ReportMetric(perMsg, "ns/msg")
	b.ReportMetric(1e9/perMsg, "msgs/s")
	return perMsg
}

// publish publishes b.N messages of run on r.topic from 8 goroutines.
func publish(b *testing.B, r adapterRun, run string) {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := r.pub.Publish(r.topic, newMessage(run, i)); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("publish: %v", first)
	}
}

func openGoChannel(*testing.B) func(b *testing.B) adapterRun {
	return func(b *testing.B) adapterRun {
		ps, err := surelygochannel.New() // persistent: keeps what is published before the subscription
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ps.Close() })
		return adapterRun{topic: "bench_" + watermill.NewShortUUID(), pub: ps, sub: ps}
	}
}

func openNATS(b *testing.B) func(b *testing.B) adapterRun {
	url := testbroker.EmbeddedNATS(b)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return func(b *testing.B) adapterRun {
		id := watermill.NewShortUUID()
		topic := "bench_" + id
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := surelynats.EnsureStream(ctx, nc, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := js.DeleteStream(ctx, topic); err != nil {
				b.Errorf("delete stream %s: %v", topic, err)
			}
		})
		pub, err := surelynats.NewPublisher(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = pub.Close() })
		sub, err := surelynats.NewSubscriber(url, "bench", delivery.WithConcurrency(adapterConcurrency))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Close() })
		return adapterRun{topic: topic, pub: pub, sub: sub}
	}
}

func openRedisStream(b *testing.B) func(b *testing.B) adapterRun {
	admin := testenv.Redis(b)
	o := admin.Options()
	opts := &redis.UniversalOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, DB: o.DB}
	return func(b *testing.B) adapterRun {
		topic := "surely-bench:stream:" + watermill.NewShortUUID()
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := admin.Del(ctx, topic).Err(); err != nil {
				b.Errorf("delete stream %s: %v", topic, err)
			}
		})
		// Each owns (and closes) its own client.
		pub, err := surelyredis.NewPublisher(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = pub.Close() })
		sub, err := surelyredis.NewSubscriber(opts, "bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Close() })
		return adapterRun{topic: topic, pub: pub, sub: sub}
	}
}

func openAMQP(b *testing.B) func(b *testing.B) adapterRun {
	url := testamqp.URL(b)
	admin, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = admin.Close() })
	return func(b *testing.B) adapterRun {
		topic := "surely_bench_" + watermill.NewShortUUID()
		if err := withChannel(admin, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(topic, true, false, false, false, surelyamqp.QueueArguments())
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := withChannel(admin, func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(topic, false, false, false)
				return err
			}); err != nil {
				b.Errorf("delete queue %s: %v", topic, err)
			}
		})
		pub, err := surelyamqp.NewPublisher(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = pub.Close() })
		sub, err := surelyamqp.NewSubscriber(url, delivery.WithConcurrency(adapterConcurrency))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Close() })
		return adapterRun{topic: topic, pub: pub, sub: sub}
	}
}

func withChannel(c *amqp.Connection, fn func(*amqp.Channel) error) error {
	ch, err := c.Channel()
	if err != nil {
		return fmt.Errorf("amqp channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	return fn(ch)
}
