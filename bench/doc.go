// Package bench holds surely's Go benchmarks. It has no library code; the
// benchmarks are in bench_test.go and never assert timings, so
// `go test ./bench/` (without -bench) runs nothing and passes at once.
//
// # Command
//
//	SURELY_REDIS_URL=redis://127.0.0.1:6379 go test -run '^$' -bench . -benchmem -count 3 ./bench/
//
// Without SURELY_REDIS_URL the surely_redis variants are skipped (they fail
// under SURELY_REQUIRE_SERVICES=1). The Redis variant writes only keys under
// a prefix of its own ("surely-bench:<run>:") and deletes them (SCAN + DEL)
// when its run ends; it never flushes the server. Compare runs with
// benchstat.
//
// # Variants
//
// Every benchmark runs the same business handler, which does nothing but
// count its calls (a run fails unless it ran once per message), in four
// variants:
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
// BenchmarkChain has a fifth, diagnostic variant, surely_nullstore: surely's
// chain on a store that acquires every claim and keeps nothing. It is the
// cost of the middleware alone; surely_memstore minus surely_nullstore is
// the in-memory store's share. memstore keeps every record (24h retention),
// so its ns/op grows with b.N as the garbage collector marks a growing heap.
//
// The target for surely_memstore is at most 1 µs and 8 allocations per
// message over bare; Watermill's chain costs about 2.3 µs and 17
// allocations.
//
// The watermill_chain variant leaves one goroutine per run: Watermill's
// default Deduplicator repository starts a cleanup goroutine on
// context.Background() that nothing can stop.
package bench
