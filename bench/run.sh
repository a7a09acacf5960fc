#!/bin/sh
# Runs the benchmarks of package bench N times (default 5) and summarises
# them with benchstat. Each invocation runs every sub-benchmark of a
# benchmark in one process, one after the other, so the ratio metrics
# (x_bare, x_naive, pct_of_bare) compare runs made seconds apart on the
# same load; benchstat reports the median of each metric over the N
# invocations. Needs the server variables of the README (SURELY_REDIS_URL,
# SURELY_AMQP_URL; NATS is embedded). BENCH, INTERLEAVED and ADAPTERS
# narrow the sets (regular expressions for -bench).
#
#   bench/run.sh [N] [output file]
set -eu
n=${1:-5}
out=${2:-bench.txt}
bench=${BENCH:-Benchmark(Router|RedisStore)\$}
interleaved=${INTERLEAVED:-RedisStoreInterleaved}
adapters=${ADAPTERS:-Adapters}
bin=$(mktemp -d)/bench.test
go test -c -o "$bin" ./bench/
: >"$out"
for _ in $(seq "$n"); do
	uptime >>"$out.load"
	"$bin" -test.run '^$' -test.bench "$bench" -test.benchmem -test.benchtime 1s >>"$out"
	"$bin" -test.run '^$' -test.bench "$interleaved" -test.benchtime 10x >>"$out"
	"$bin" -test.run '^$' -test.bench "$adapters" -test.benchmem -test.benchtime 2000x >>"$out"
done
go run golang.org/x/perf/cmd/benchstat@latest "$out"
