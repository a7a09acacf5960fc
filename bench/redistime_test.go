package bench

import (
	"context"
	"regexp"
	"strconv"
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
// port (skipped without the redis-server binary), resets its statistics
// (CONFIG RESETSTAT) before each timed run and reads INFO commandstats
// after it:
//
//   - redis_us/msg: the server's time in the commands the client sent, in
//     µs per message. A script's time includes the commands it calls, which
//     commandstats also lists on their own; they are not added twice (when
//     a script command ran, only script commands are summed).
//   - redis_calls/msg: the commands the client sent, per message.
//   - x_naive (surely variants): naive's redis_us/msg over the variant's
//     (0.25: four times the server time of the naive loop).
//
// The server's time is wall-clock time inside the command: a loaded
// machine inflates it, for every variant of the same run alike.
func BenchmarkRedisServerTime(b *testing.B) {
	srv := testenv.StartRedis(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = client.Close() })
	for _, handlers := range redisTimeHandlers {
		var naive float64
		for _, v := range storeVariants {
			b.Run("handlers="+strconv.Itoa(handlers)+"/"+v.name, func(b *testing.B) {
				ctx := context.Background()
				op := v.newOp(b, client, "surely-bench:time:"+v.name+":"+strconv.Itoa(handlers)+":"+strconv.Itoa(b.N)+":")
				warmPool(ctx, b, client)
				if err := client.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				if err := runSlice(op, handlers, 0, b.N); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				usec, calls := serverTime(b, client)
				perMsg := float64(usec) / float64(b.N)
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

var cmdstatLine = regexp.MustCompile(`(?m)^cmdstat_([a-z_|]+):calls=(\d+),usec=(\d+)`)

// scriptCommands run other commands inside their own time.
var scriptCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true,
}

// serverTime sums INFO commandstats since the last CONFIG RESETSTAT: the
// server's µs and the calls of the commands a client sent (CONFIG and INFO,
// the measurement's own, left out).
func serverTime(b *testing.B, client *redis.Client) (usec, calls int64) {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	type stat struct{ calls, usec int64 }
	stats := map[string]stat{}
	scripted := false
	for _, m := range cmdstatLine.FindAllStringSubmatch(info, -1) {
		if m[1] == "info" || m[1] == "config|resetstat" || m[1] == "config" {
			continue
		}
		c, _ := strconv.ParseInt(m[2], 10, 64)
		u, _ := strconv.ParseInt(m[3], 10, 64)
		stats[m[1]] = stat{c, u}
		if scriptCommands[m[1]] && c > 0 {
			scripted = true
		}
	}
	for name, s := range stats {
		if scripted && !scriptCommands[name] {
			continue
		}
		usec += s.usec
		calls += s.calls
	}
	return usec, calls
}
