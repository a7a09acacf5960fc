package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// storeBatch is the batch size of the batched variants (WithBatching).
const storeBatch = 64

// messageOp processes message i of a run against a store: a claim, then a
// complete. It fails unless the claim acquired.
type messageOp func(ctx context.Context, i int) error

type storeVariant struct {
	name string
	// newOp builds the variant on client; every key it writes starts with
	// prefix.
	newOp func(b *testing.B, client *redis.Client, prefix string) messageOp
}

var storeVariants = []storeVariant{
	{"naive", naiveOp},
	{"surely", surelyStoreOp()},
	{"surely_batched", surelyStoreOp(redisstore.WithBatching(storeBatch))},
}

// naiveOp is the naive loop the store is compared with: two plain go-redis
// commands per message, each its own round trip, no script.
//
//	claim:    SET <key> <token> NX PX 60000     (refused: a duplicate)
//	complete: SET <key> done XX PX 86400000
//
// It keeps no attempt count, history, fingerprint or outcome and does no
// fencing (a stale owner's complete overwrites its successor's record):
// the least a claim-then-complete dedup can send.
func naiveOp(_ *testing.B, client *redis.Client, prefix string) messageOp {
	return func(ctx context.Context, i int) error {
		key := prefix + strconv.Itoa(i)
		ok, err := client.SetNX(ctx, key, "t"+strconv.Itoa(i), time.Minute).Result()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("claim %s: not acquired", key)
		}
		return client.SetXX(ctx, key, "done", 24*time.Hour).Err()
	}
}

// surelyStoreOp is redisstore's Claim and Complete, as the dedup step calls
// them for a fresh message (no outcome messages).
func surelyStoreOp(opts ...idempotency.Option) func(b *testing.B, client *redis.Client, prefix string) messageOp {
	return func(b *testing.B, client *redis.Client, prefix string) messageOp {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		store, err := redisstore.New(ctx, client, append([]idempotency.Option{redisstore.WithPrefix(prefix)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, i int) error {
			res, err := store.Claim(ctx, idempotency.ClaimRequest{
				Namespace: namespace, Key: strconv.Itoa(i), Fingerprint: "fp-" + strconv.Itoa(i),
				Lease: time.Minute, MaxAttempts: 10,
			})
			if err != nil {
				return err
			}
			if res.Status != idempotency.Acquired {
				return fmt.Errorf("claim %d: %v", i, res.Status)
			}
			return store.Complete(ctx, res.Lease, idempotency.Outcome{})
		}
	}
}

// BenchmarkRedisStore measures one message's store traffic, a claim and a
// complete, with 1, 16 and 64 concurrent handlers (goroutines) on one client:
// the naive loop, redisstore without batching, and redisstore with
// WithBatching(64). ns/op is per message; x_naive is the naive loop's
// ns/op divided by the variant's, from the same run (throughput relative
// to naive: above 1 is faster).
func BenchmarkRedisStore(b *testing.B) {
	for _, handlers := range benchHandlers {
		group := "store/handlers=" + strconv.Itoa(handlers)
		for _, v := range storeVariants {
			b.Run(fmt.Sprintf("handlers=%d/%s", handlers, v.name), func(b *testing.B) {
				runStore(b, v, handlers)
				if v.name == "naive" {
					setBaseline(b, group)
				} else {
					reportSpeedup(b, group, "x_naive")
				}
			})
		}
	}
}

func runStore(b *testing.B, v storeVariant, handlers int) {
	b.ReportAllocs()
	client := testenv.Redis(b)
	prefix := "surely-bench:" + watermill.NewShortUUID() + ":"
	b.Cleanup(func() {
		if err := deleteKeys(client, prefix); err != nil {
			b.Errorf("delete %s* keys: %v", prefix, err)
		}
	})
	op := v.newOp(b, client, prefix)
	ctx := context.Background()
	warmPool(ctx, b, client)

	var (
		next    atomic.Int64
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	b.ResetTimer()
	for range handlers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(ctx, i); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// storeSlice is how many messages a variant processes in one turn of
// BenchmarkRedisStoreInterleaved.
const storeSlice = 256

// BenchmarkRedisStoreInterleaved is BenchmarkRedisStore with the variants
// taking turns: each op is one round in which every variant processes 256
// messages with the given number of handlers, in a rotating order. Load
// that changes over seconds (other processes on a shared machine) then
// weighs on every variant alike, so the ratios hold better than between
// sub-benchmarks run one after the other. ns/op is per round; <variant>-ns/msg
// is each variant's time per message, and <variant>-x_naive the naive
// loop's time per message divided by the variant's.
func BenchmarkRedisStoreInterleaved(b *testing.B) {
	for _, handlers := range benchHandlers {
		b.Run("handlers="+strconv.Itoa(handlers), func(b *testing.B) {
			client := testenv.Redis(b)
			ops := make([]messageOp, len(storeVariants))
			for i, v := range storeVariants {
				prefix := "surely-bench:" + watermill.NewShortUUID() + ":"
				b.Cleanup(func() {
					if err := deleteKeys(client, prefix); err != nil {
						b.Errorf("delete %s* keys: %v", prefix, err)
					}
				})
				ops[i] = v.newOp(b, client, prefix)
			}
			warmPool(context.Background(), b, client)
			spent := make([]time.Duration, len(ops))
			next := make([]int, len(ops))
			b.ResetTimer()
			for r := range b.N {
				for k := range ops {
					v := (r + k) % len(ops)
					start := time.Now()
					if err := runSlice(ops[v], handlers, next[v], storeSlice); err != nil {
						b.Fatalf("%s: %v", storeVariants[v].name, err)
					}
					spent[v] += time.Since(start)
					next[v] += storeSlice
				}
			}
			b.StopTimer()
			msgs := float64(b.N * storeSlice)
			naive := float64(spent[0]) / msgs
			for i, v := range storeVariants {
				perMsg := float64(spent[i]) / msgs
				b.ReportMetric(perMsg, v.name+"-ns/msg")
				if i > 0 {
					b.ReportMetric(naive/perMsg, v.name+"-x_naive")
				}
			}
		})
	}
}

// runSlice processes messages from, from+1, ... from+n-1 with op on
// handlers goroutines.
func runSlice(op messageOp, handlers, from, n int) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	ctx := context.Background()
	for range handlers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(ctx, from+i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// benchHandlers are the numbers of concurrent handlers the store
// benchmarks run with: one, the goal's 16, and 64, where batching gathers
// enough calls to pay.
var benchHandlers = []int{1, 16, 64}
