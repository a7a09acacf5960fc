#!/bin/sh
# Runs the benchmarks of package bench N times (default 5) and summarises
# them with benchstat. Each invocation runs every sub-benchmark of a
# benchmark in one process, one after the other, so the ratio metrics
# (x_bare, x_naive, x_handwritten, pct_of_bare) compare runs made seconds apart on the
# same load; benchstat reports the median of each metric over the N
# invocations. Needs the server variables of the README (SURELY_REDIS_URL,
# SURELY_AMQP_URL, SURELY_POSTGRES_URL, SURELY_MYSQL_URL; NATS is
# embedded, SQLite a file, BenchmarkRedisServerTime starts a redis-server
# of its own). BENCH, INTERLEAVED, ADAPTERS (BenchmarkAdapters and
# BenchmarkAdaptersSlow), INBOX, SQLLEASE and SERVERTIME narrow the sets
# (regular expressions for -bench; '^$' runs none).
#
#   bench/run.sh [N] [output file]
set -eu
n=${1:-5}
out=${2:-bench.txt}
bench=${BENCH:-Benchmark(Router|RedisStore)\$}
interleaved=${INTERLEAVED:-RedisStoreInterleaved}
adapters=${ADAPTERS:-Adapters}
inbox=${INBOX:-Inbox}
sqllease=${SQLLEASE:-SQLLease}
servertime=${SERVERTIME:-RedisServerTime}
bin=$(mktemp -d)/bench.test
go test -c -o "$bin" ./bench/
: >"$out"
# load NAME: the load average before a group, into $out.load.
load() { echo "$(uptime) $1" >>"$out.load"; }
: >"$out.load"
for _ in $(seq "$n"); do
	load "$bench"
	"$bin" -test.run '^$' -test.bench "$bench" -test.benchmem -test.benchtime 1s >>"$out"
	load "$interleaved"
	"$bin" -test.run '^$' -test.bench "$interleaved" -test.benchtime 10x >>"$out"
	load "$adapters"
	"$bin" -test.run '^$' -test.bench "$adapters" -test.benchmem -test.benchtime 2000x >>"$out"
	load "$inbox"
	"$bin" -test.run '^$' -test.bench "$inbox" -test.benchtime 5000x >>"$out"
	load "$sqllease"
	"$bin" -test.run '^$' -test.bench "$sqllease" -test.benchtime 5000x >>"$out"
	load "$servertime"
	"$bin" -test.run '^$' -test.bench "$servertime" -test.benchtime 10000x >>"$out"
done
go run golang.org/x/perf/cmd/benchstat@latest "$out"
