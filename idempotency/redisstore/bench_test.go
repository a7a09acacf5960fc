package redisstore_test

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// BenchmarkScripts measures what the store's scripts cost the Redis server
// on the path of a message: the claim of a new key, the complete that
// follows, and the claim of a duplicate. It starts a redis-server of its
// own, so that INFO commandstats counts only its calls: server-µs/call is
// the server's time per EVALSHA, inner commands included (wall clock, so a
// loaded machine inflates it). The calls come from 16 goroutines, as from
// 16 handlers; ns/op is the wall time per call.
func BenchmarkScripts(b *testing.B) {
	srv := testenv.StartRedis(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(b.Context(), client)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := 0
	// keys returns n keys no earlier run used.
	keys := func(n int) []string {
		run++
		ks := make([]string, n)
		for i := range ks {
			ks[i] = strconv.Itoa(run) + "-" + strconv.Itoa(i)
		}
		return ks
	}
	// claim and complete run on the measuring goroutines too: they report
	// with Errorf, which any goroutine may call.
	claim := func(b *testing.B, key string, want idempotency.Status) idempotency.Lease {
		req := claimReq(key)
		req.TraceID, req.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		res, err := s.Claim(ctx, req)
		if err != nil || res.Status != want {
			b.Errorf("claim %s: %v %v, want %v", key, res.Status, err, want)
		}
		return res.Lease
	}
	complete := func(b *testing.B, l idempotency.Lease) {
		if err := s.Complete(ctx, l, idempotency.Outcome{}); err != nil {
			b.Errorf("complete %s: %v", l.Key, err)
		}
	}

	b.Run("claim_new", func(b *testing.B) {
		ks := keys(b.N)
		measureServer(b, client, func(i int) { claim(b, ks[i], idempotency.Acquired) })
	})
	b.Run("complete", func(b *testing.B) {
		leases := make([]idempotency.Lease, b.N)
		for i, k := range keys(b.N) {
			leases[i] = claim(b, k, idempotency.Acquired)
		}
		measureServer(b, client, func(i int) { complete(b, leases[i]) })
	})
	b.Run("claim_duplicate", func(b *testing.B) {
		ks := keys(b.N)
		for _, k := range ks {
			complete(b, claim(b, k, idempotency.Acquired))
		}
		measureServer(b, client, func(i int) { claim(b, ks[i], idempotency.Completed) })
	})
}

// measureServer runs call(0) ... call(b.N-1) on 16 goroutines and reports
// the server's time per EVALSHA they sent.
func measureServer(b *testing.B, client *redis.Client, call func(i int)) {
	before := evalshaStats(b, client)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				call(i)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	after := evalshaStats(b, client)
	if calls := after.calls - before.calls; calls > 0 {
		b.ReportMetric(float64(after.usec-before.usec)/float64(calls), "server-µs/call")
	}
}

type commandStats struct{ calls, usec int64 }

var evalshaLine = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+)`)

func evalshaStats(b *testing.B, client *redis.Client) commandStats {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaLine.FindStringSubmatch(info)
	if m == nil {
		return commandStats{}
	}
	calls, _ := strconv.ParseInt(m[1], 10, 64)
	usec, _ := strconv.ParseInt(m[2], 10, 64)
	return commandStats{calls: calls, usec: usec}
}
