// Package bench holds surely's Go benchmarks. It has no library code; the
// benchmarks are in bench_test.go and never assert timings, so
// `go test ./bench/` (without -bench) runs nothing and passes at once.
//
// # Command
//
//	SURELY_REDIS_URL=redis://127.0.0.1:6379 SURELY_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ \
//	SURELY_POSTGRES_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
//	SURELY_MYSQL_URL='root@tcp(127.0.0.1:3306)/test' bench/run.sh 3 bench.txt
//
// bench/run.sh builds the test binary once, runs BenchmarkRouter and
// BenchmarkRedisStore (-benchtime 1s), BenchmarkRedisStoreInterleaved
// (10 rounds), BenchmarkAdapters and BenchmarkAdaptersSlow (2000
// messages), BenchmarkInbox and BenchmarkSQLLease (5000 messages) and
// BenchmarkRedisServerTime (10000 messages) N times, each line in a
// process of its own, writes the load average before each line to
// <output>.load, and summarises the N runs with benchstat (medians).
// docs/BENCHMARKS.md has the figures and the commands. A single benchmark:
//
//	SURELY_REDIS_URL=redis://127.0.0.1:6379 go test -run '^$' -bench Router -benchmem ./bench/
//
// Without SURELY_REDIS_URL the Redis variants are skipped (they fail under
// SURELY_REQUIRE_SERVICES=1), without SURELY_AMQP_URL the RabbitMQ adapter
// (NATS is embedded). They write only keys, streams and queues of their own
// ("surely-bench:<run>:", "surely_bench_<run>") and delete them when their
// run ends; they never flush a server.
//
// # Ratios in one run
//
// A shared machine's load drifts over minutes, so every ratio is taken
// inside one process: x_bare (BenchmarkRouter: ns/op over bare's),
// x_naive (BenchmarkRedisStore: naive's ns/op over the variant's, so above
// 1 is faster), pct_of_bare (BenchmarkAdapters: bare's ns/msg over the
// variant's, times 100), each against its baseline's latest run in the
// same process; x_handwritten (BenchmarkInbox) and x_naive
// (BenchmarkSQLLease, BenchmarkRedisServerTime) likewise.
// BenchmarkRedisStoreInterleaved goes further and alternates its variants
// every 256 messages.
//
// # Variants
//
// BenchmarkRouter and BenchmarkChain run the same business handler, which
// does nothing but count its calls (a run fails unless it ran once per
// message), in these variants:
//
//   - bare: the handler alone.
//   - watermill_chain: Watermill's own middleware.PoisonQueue, Retry and
//     Deduplicator, outermost first, the order surely uses for the same
//     steps. The Deduplicator keys on the idempotency_key metadata (as
//     surely does) with its default in-memory repository. Its default key
//     factory, Adler-32 of the payload, is not used: it collides for about
//     98% of these short payloads, so the handler would not run, and it
//     allocates a 32 KiB buffer per message.
//   - surely_memstore: handler.New(fn, WithStore(memstore, "bench"),
//     WithDeadLetter(gochannel, "dead")) with the default policy, breaker,
//     lease and extractor.
//   - surely_redis: the same with idempotency/redisstore (two round trips
//     per message: Claim, Complete).
//   - surely_redis_batched (BenchmarkRouter): the same with
//     redisstore.WithBatching(64): the router's concurrent handlers share
//     round trips.
//   - surely_sqlite_inbox (BenchmarkRouter): the transactional inbox of
//     idempotency/sqlstore on a SQLite file (WAL, one connection,
//     synchronous NORMAL); surely_sqlite_inbox_syncfull the same with
//     synchronous FULL, an fsync per commit.
//
// Every message has a unique idempotency_key and a unique payload, so no
// variant ever sees a duplicate: the benchmarks measure the first-delivery
// success path, the one every message takes.
//
// # BenchmarkRouter
//
// One message end to end through a GoChannel pub/sub and a message.Router:
// Publish, delivery, the chain, ack. ns/op is per message; msgs/s is
// b.N divided by the measured time. Per run, the pub/sub, the router, the
// store and b.N messages are built before the timer starts; the timer then
// covers publishing all b.N messages and waiting until the last one has
// been processed. A message counts as processed when the whole chain
// returned nil (for surely: after Complete), in one outermost wrapper
// common to all variants, just before the router acks it. At most 64
// messages are in flight (published, not yet processed), so the router
// runs up to 64 handlers at once. B/op and allocs/op count every
// allocation in the process during the timed part, the broker's and the
// router's included, through the same publishing path in every variant:
// subtract bare to get the chain's share.
//
// # BenchmarkChain
//
// The assembled message.HandlerFunc alone, called directly and sequentially
// on pre-built messages (built 4096 at a time with the timer stopped): no
// broker, no router, no goroutines. It isolates the per-message cost of
// each chain. bare is a plain function call on one reused message (it
// keeps no state; building b.N messages for a 2 ns call would take minutes
// outside the timer). surely_redis here is sequential: two round trips per
// message, one message at a time.
//
// BenchmarkChain has a diagnostic variant of its own, surely_nullstore:
// surely's chain on a store that acquires every claim and keeps nothing.
// It is the cost of the middleware alone; surely_memstore minus surely_nullstore is
// the in-memory store's share. memstore keeps every record (24h retention),
// so its ns/op grows with b.N as the garbage collector marks a growing heap.
//
// The target for surely_memstore is at most 1 µs and 8 allocations per
// message over bare, not met: it costs 11 allocations and 1,170 B, and
// 2.0 µs on a quiet machine (3.9 µs in the loaded retake of
// docs/BENCHMARKS.md); Watermill's chain costs 17 allocations, about
// 2.3 µs quiet (3.5 µs loaded).
//
// # BenchmarkTelemetry
//
// BenchmarkChain's surely_nullstore chain with observability off (the
// default: no provider), with the OTel API's no-op tracer and meter
// providers, and with the SDK (every span sampled and ended, metrics
// aggregated by a manual reader, nothing exported). When tracing and
// metrics were added, off allocated exactly what the chain had before (5
// allocs, 368 B per message): instrumentation that is not configured is
// not installed. The chain now costs 8 allocs, 608 B: one of them is
// Dedup's per-attempt handler context (canceled when a handler hangs),
// which costs about 5 more when the handler waits on it (Done), and two
// the deadlines of the Claim and the Complete (WithStoreTimeout), which
// make a timer only when the store waits on Done.
//
// The watermill_chain variant leaves one goroutine per run: Watermill's
// default Deduplicator repository starts a cleanup goroutine on
// context.Background() that nothing can stop.
//
// # BenchmarkRedisStore
//
// The store's traffic for one message, a claim and a complete, from 1, 16
// and 64 goroutines on one go-redis client, in three variants: naive, two
// plain commands (SET key token NX PX 60000, then SET key done XX PX
// 86400000; no fencing, attempt count, history or outcome), surely
// (redisstore Claim and Complete: a pipelined SET NX and PEXPIRETIME,
// then one EVALSHA) and surely_batched (the same with
// WithBatching(64), whose claims are scripts too). BenchmarkRedisStoreInterleaved runs the
// same three in turns of 256 messages.
//
// # BenchmarkAdapters
//
// Consuming through surely's adapters (GoChannel, NATS JetStream embedded
// in the process, Redis Streams, RabbitMQ) and a message.Router: bare
// (the counting handler alone) against handler.New with the Redis store,
// unbatched and batched. Each run publishes b.N messages first (not
// measured) and then times from the first delivery to the last processed
// message (ns/msg). NATS and RabbitMQ run with Concurrency 16; Redis
// Streams hands out one message at a time; the persistent GoChannel hands
// out all b.N at once (a goroutine each).
//
// BenchmarkAdaptersSlow is the same on NATS and RabbitMQ with a business
// handler that sleeps 1 ms, at 16 messages in flight (bare's ceiling is
// 16 messages per ms), bare against surely_redis: the case where
// surely's round trips and CPU sit next to a handler that waits.
// bench/run.sh runs it with BenchmarkAdapters (ADAPTERS matches both).
//
// Both report cpu_ns/msg: the CPU time (user and system) of the whole
// process from the router's start to the last processed message, per
// message. It includes the embedded NATS server, but not RabbitMQ or
// Redis, which run in processes of their own. Unlike ns/msg it hardly
// depends on the machine's load, so the difference between surely_redis
// and bare is surely's client CPU per message.
package bench
