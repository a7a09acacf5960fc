package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/internal/testenv"
)

// redisTimeHandlers are the numbers of concurrent handlers of
// BenchmarkRedisServerTime.
var redisTimeHandlers = []int{1, 16}

// BenchmarkRedisServerTime measures what BenchmarkRedisStore's variants
// (naive, surely, surely_batched: a claim and a complete per message) cost
// the Redis server. It starts a redis-server of its own on a free loopback
// port (skipped without the redis-server binary), logs every command in
// its slow log (slowlog-log-slower-than 0), empties the log before each
// timed run and reads it after:
//
//   - redis_us/msg: the server's time in the commands the client sent, in
//     µs per message. A script's time includes the commands it calls,
//     which the slow log also lists, as sent by the scripting client:
//     those are left out, so a variant that mixes native commands and
//     scripts (surely: a native claim, a scripted complete) counts each
//     command the client sent once.
//   - <command>-redis_us/msg: redis_us/msg of each command the client
//     sent (set, evalsha, ...): where the server's time goes.
//   - redis_calls/msg: the commands the client sent, per message.
//   - x_naive (surely variants): naive's redis_us/msg over the variant's
//     (0.25: four times the server time of the naive loop).
//
// The server's time is wall-clock time inside the command: a loaded
// machine inflates it, for every variant of the same run alike. Logging
// every command costs the server time outside the commands, so msgs/s
// here is lower than in BenchmarkRedisStore.
func BenchmarkRedisServerTime(b *testing.B) {
	srv := testenv.StartRedis(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "10000000"}} {
		if err := client.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, handlers := range redisTimeHandlers {
		var naive float64
		for _, v := range storeVariants {
			b.Run("handlers="+strconv.Itoa(handlers)+"/"+v.name, func(b *testing.B) {
				op := v.newOp(b, client, "surely-bench:time:"+v.name+":"+strconv.Itoa(handlers)+":"+strconv.Itoa(b.N)+":")
				warmPool(ctx, b, client)
				if err := client.SlowLogReset(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				if err := runSlice(op, handlers, 0, b.N); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				usec, calls, byCommand := serverTime(b, client)
				perMsg := float64(usec) / float64(b.N)
				for name, u := range byCommand {
					b.ReportMetric(float64(u)/float64(b.N), name+"-redis_us/msg")
				}
				b.ReportMetric(perMsg, "redis_us/msg")
				b.ReportMetric(float64(calls)/float64(b.N), "redis_calls/msg")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				if v.name == "naive" {
					naive = perMsg
				} else if naive > 0 && perMsg > 0 {
					b.ReportMetric(naive/perMsg, "x_naive")
				}
			})
		}
	}
}

// serverTime sums the slow log since the last SLOWLOG RESET: the server's
// µs and the number of the commands a client sent. Commands a script
// called (logged with the scripting client's address, "?:0") and the
// measurement's own (SLOWLOG) are left out.
func serverTime(b *testing.B, client *redis.Client) (usec, calls int64, byCommand map[string]int64) {
	entries, err := client.SlowLogGet(context.Background(), -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	byCommand = map[string]int64{}
	for _, e := range entries {
		if strings.HasPrefix(e.ClientAddr, "?") || len(e.Args) == 0 || strings.EqualFold(e.Args[0], "slowlog") {
			continue
		}
		usec += e.Duration.Microseconds()
		calls++
		byCommand[strings.ToLower(e.Args[0])] += e.Duration.Microseconds()
	}
	return usec, calls, byCommand
}
