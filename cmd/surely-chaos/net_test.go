package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/internal/testenv"
)

// netRun is smallRun with network faults.
func netRun(t *testing.T, mode, broker string, extra ...string) config {
	t.Helper()
	cfg := smallRun(t, mode, broker)
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	args := append([]string{"-mode", mode, "-broker", broker, "-ops", "1000", "-kills", "2", "-pauses", "1", "-net"}, extra...)
	full, err := parseFlags(fs, args)
	require.NoError(t, err)
	full.childArgs, full.timeout, full.settleGrace = cfg.childArgs, 3*time.Minute, cfg.settleGrace
	full.postgresURL = testenv.URL(t, postgresEnv)
	return full
}

func netTotal(t *testing.T, f map[string]string) int {
	t.Helper()
	sum := 0
	for _, k := range netKinds {
		sum += num(t, f, "net_"+k)
	}
	require.Equal(t, sum, num(t, f, "net_faults"))
	return sum
}

// TestNetInbox: the transactional inbox on PostgreSQL, with every network
// fault between the consumers and the store, the broker and the
// effects database, besides kills and a pause: nothing lost, nothing
// doubled, every acknowledged completion's record there after the run.
func TestNetInbox(t *testing.T) {
	t.Parallel()
	f := runChaos(t, netRun(t, modeInbox, brokerNATS, "-broker-restarts", "0"))
	require.Zero(t, num(t, f, "lost"))
	require.Zero(t, num(t, f, "double_effects"), "the inbox commits effect and DONE together, whatever the network does")
	require.Positive(t, netTotal(t, f), "network faults were injected")
	require.Positive(t, num(t, f, "acked_checked"))
	require.Zero(t, num(t, f, "acked_lost"))
	require.Equal(t, num(t, f, "dlq_expected"), num(t, f, "dead_lettered"))
}

// TestNetLeaseFailover: lease mode on a primary, a replica and three
// Sentinels, with network faults; the primary is killed while its replica
// lags, and Complete waits for the replica: no acknowledged completion is
// lost, nothing is lost, and every double effect has its window.
func TestNetLeaseFailover(t *testing.T) {
	t.Parallel()
	testenv.Binary(t, "redis-server")
	f := runChaos(t, netRun(t, modeLease, brokerNATS, "-failover", "-broker-restarts", "0"))
	require.Equal(t, 1, num(t, f, "failovers"))
	require.Equal(t, "true", f["wait_replicas"])
	require.Zero(t, num(t, f, "lost"))
	require.Positive(t, num(t, f, "acked_checked"))
	require.Zero(t, num(t, f, "acked_lost"), "WithWaitReplicas: an acknowledged completion survives the failover")
	require.LessOrEqual(t, num(t, f, "double_effects"), num(t, f, "windows"))
	require.Zero(t, num(t, f, "window_violations"))
	require.Positive(t, netTotal(t, f))
}

// TestFailoverWithoutWait: the same failover without WithWaitReplicas:
// the completions the primary acknowledged in its replica's last second
// are lost. The run counts them, tells what became of each, and explains
// every double effect; it does not fail for them.
func TestFailoverWithoutWait(t *testing.T) {
	t.Parallel()
	testenv.Binary(t, "redis-server")
	cfg := smallRun(t, modeLease, brokerNATS)
	cfg.postgresURL = testenv.URL(t, postgresEnv)
	cfg.failover, cfg.waitReplicas, cfg.redisRestarts, cfg.brokerRestarts = true, false, 0, 0
	f := runChaos(t, cfg)
	require.Equal(t, 1, num(t, f, "failovers"))
	require.Equal(t, "false", f["wait_replicas"])
	require.Zero(t, num(t, f, "lost"))
	require.Equal(t, num(t, f, "acked_lost"), num(t, f, "lost_rerun")+num(t, f, "lost_forgotten"))
	require.LessOrEqual(t, num(t, f, "double_effects"), num(t, f, "windows"))
	require.Zero(t, num(t, f, "window_violations"))
	t.Logf("acknowledged completions lost by the failover: %s", f["acked_lost"])
}

// TestSoak is the two-minute soak: a steady 50 operations a second for
// two minutes with every network fault on, in lease mode; nothing lost,
// and each consumer's resident memory and goroutines flat after warm-up
// (checked without the race detector only; under it the figures are
// logged).
// It runs with SURELY_REQUIRE_SERVICES=1 (as CI sets it) or
// SURELY_CHAOS_SOAK=1, and never with -short.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a two-minute soak")
	}
	if os.Getenv("SURELY_REQUIRE_SERVICES") != "1" && os.Getenv("SURELY_CHAOS_SOAK") != "1" {
		t.Skip("a two-minute soak: set SURELY_CHAOS_SOAK=1 (or SURELY_REQUIRE_SERVICES=1)")
	}
	t.Parallel()
	testenv.Binary(t, "redis-server")
	plot := filepath.Join(t.TempDir(), "soak.svg")
	cfg, err := parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), []string{
		"-mode", "lease", "-broker", "nats", "-duration", "2m", "-rate", "50", "-stats-every", "2s", "-plot", plot,
	})
	require.NoError(t, err)
	cfg.childArgs = []string{"-test.run=^$"}
	cfg.postgresURL = testenv.URL(t, postgresEnv)
	cfg.settleGrace = 500 * time.Millisecond
	// The consumers are this test binary: under the race detector their
	// memory is mostly its shadow memory, which grows with the run.
	cfg.skipFlat = raceEnabled
	require.Equal(t, 6000, cfg.ops)
	require.Zero(t, cfg.kills, "a soak keeps its consumers")
	require.True(t, cfg.net)
	f := runChaos(t, cfg)
	require.Zero(t, num(t, f, "lost"))
	require.Zero(t, num(t, f, "window_violations"))
	require.Equal(t, 3, num(t, f, "consumers_sampled"))
	t.Logf("growth after warm-up: resident memory %s %%, goroutines %s %% (race detector: %t)",
		f["rss_growth_max_pct"], f["goroutine_growth_max_pct"], raceEnabled)
	require.Positive(t, netTotal(t, f))
	svg, err := os.ReadFile(plot)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(svg), "<svg"))
	require.Equal(t, 6, strings.Count(string(svg), "<polyline"), "memory and goroutines of 3 consumers")
}

// TestSoakFlags: -duration makes a soak: ops from the rate, network faults
// on, no crashes unless asked for.
func TestSoakFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), []string{"-duration", "30m", "-rate", "20", "-pauses", "1"})
	require.NoError(t, err)
	require.Equal(t, 36000, cfg.ops)
	require.True(t, cfg.net)
	require.Zero(t, cfg.kills)
	require.Zero(t, cfg.brokerRestarts)
	require.Equal(t, 1, cfg.pauses, "asked for")
	require.Equal(t, 5*time.Second, cfg.statsEvery)
	require.Equal(t, 40*time.Minute, cfg.timeout)
	for _, args := range [][]string{
		{"-mode", "inbox", "-failover"},
		{"-mode", "lease", "-failover", "-redis-restarts", "1"},
		{"-duration", "1m", "-rate", "0"},
	} {
		_, err := parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), args)
		require.Error(t, err, "%q", args)
	}
	cfg, err = parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), []string{"-mode", "lease", "-failover"})
	require.NoError(t, err)
	require.Zero(t, cfg.redisRestarts, "the failover replaces the restarts")
}

// TestSoakProblems: a consumer that grows fails the soak; goroutines must
// grow past both bounds.
func TestSoakProblems(t *testing.T) {
	t.Parallel()
	ok := result{mode: modeLease, settled: true, soak: true, growth: []growth{{pid: 1}}}
	require.Empty(t, ok.problems())
	r := ok
	r.rssGrowthMax = 0.2
	require.NotEmpty(t, r.problems())
	r = ok
	r.goroutGrowMax, r.goroutGrowAbs = 0.12, 3
	require.Empty(t, r.problems(), "a few goroutines more is noise")
	r.goroutGrowAbs = 30
	require.NotEmpty(t, r.problems())
	r = ok
	r.growth = nil
	require.NotEmpty(t, r.problems(), "nothing sampled")
	lost := result{mode: modeLease, settled: true, ackedLost: 1}
	require.NotEmpty(t, lost.problems(), "an acknowledged completion lost without a failover")
	lost.failovers, lost.waitReplicas = 1, true
	require.NotEmpty(t, lost.problems(), "lost although Complete waited for the replica")
	lost.waitReplicas = false
	require.Empty(t, lost.problems(), "a failover without WAIT may lose them: counted, not failed")
}
