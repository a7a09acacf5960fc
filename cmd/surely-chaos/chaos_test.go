package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/internal/testenv"
)

// TestMain turns the test binary into a consumer process when the parent
// re-executes it (childEnv set), as the program does.
func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(raw))
	}
	// toxiproxy (-net) leaves goroutines of its links behind when a toxic
	// is added to or removed from a link whose connection closed meanwhile:
	// a toxic's stage (toxics.ToxicStub.Run: NoopToxic.Pipe,
	// LatencyToxic.Pipe, ...) or the link's reader (ToxicLink.read, in
	// ChanWriter.Write) blocks forever sending to a channel nobody reads
	// any more. A few per run, in the parent only, all inside toxiproxy's
	// link code; not surely's, so they are ignored wherever they block.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"))
}

// smallRun is the CI-sized run: about a thousand operations with a few of
// every fault.
func smallRun(t *testing.T, mode, broker string) config {
	t.Helper()
	cfg, err := parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), []string{
		"-mode", mode, "-broker", broker, "-ops", "1000", "-kills", "4", "-pauses", "1", "-consumers", "3",
	})
	require.NoError(t, err)
	cfg.childArgs = []string{"-test.run=^$"}
	cfg.timeout = 2 * time.Minute
	cfg.settleGrace = 500 * time.Millisecond
	return cfg
}

var linePattern = regexp.MustCompile(`^chaos: mode=(\w+) broker=(\w+) ops=(\d+) kills=(\d+) redis_restarts=(\d+) lost=(\d+) double_effects=(\d+) dead_lettered=(\d+) dlq_expected=(\d+) (.*)$`)

// runChaos runs cfg and returns its result line's fields.
func runChaos(t *testing.T, cfg config) map[string]string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cfg.stdout, cfg.stderr = &stdout, &stderr
	res, err := run(t.Context(), cfg)
	t.Logf("progress:\n%s", stderr.String())
	require.NoError(t, err)
	out := strings.TrimSpace(stdout.String())
	require.NotContains(t, out, "\n", "exactly one line on stdout")
	m := linePattern.FindStringSubmatch(out)
	require.NotNil(t, m, "result line %q", out)
	fields := map[string]string{"mode": m[1], "broker": m[2], "ops": m[3], "kills": m[4], "redis_restarts": m[5],
		"lost": m[6], "double_effects": m[7], "dead_lettered": m[8], "dlq_expected": m[9]}
	for _, kv := range strings.Fields(m[10]) {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, kv)
		fields[k] = v
	}
	require.Empty(t, res.problems(), "line: %s", out)
	t.Log(out)
	return fields
}

func num(t *testing.T, fields map[string]string, k string) int {
	t.Helper()
	v, err := strconv.Atoi(fields[k])
	require.NoError(t, err, "field %s=%q", k, fields[k])
	return v
}

// TestInboxNATS: PostgreSQL transactional inbox, embedded NATS restarted
// by the run, consumers killed and paused: nothing lost, nothing doubled.
func TestInboxNATS(t *testing.T) {
	t.Parallel()
	pg := testenv.URL(t, postgresEnv)
	cfg := smallRun(t, modeInbox, brokerNATS)
	cfg.postgresURL = pg
	cfg.brokerRestarts = 1
	f := runChaos(t, cfg)

	require.Equal(t, "inbox", f["mode"])
	require.Equal(t, "nats", f["broker"])
	require.Equal(t, 1000, num(t, f, "ops"))
	require.Equal(t, 4, num(t, f, "kills"))
	require.Equal(t, 0, num(t, f, "redis_restarts"))
	require.Equal(t, 1, num(t, f, "broker_restarts"))
	require.Zero(t, num(t, f, "lost"))
	require.Zero(t, num(t, f, "double_effects"), "the inbox commits effect and DONE together")
	require.Equal(t, 10, num(t, f, "dlq_expected"))
	require.Equal(t, num(t, f, "dlq_expected"), num(t, f, "dead_lettered"))
	require.Equal(t, num(t, f, "pauses"), num(t, f, "fenced"), "every paused consumer's stale attempt was fenced")
	require.Zero(t, num(t, f, "windows"), "no lease windows in inbox mode")
}

// TestLeaseRedis: Redis store on a private redis-server with AOF, killed
// and restarted by the run; Redis Streams broker: nothing lost, every
// double effect inside an effect-complete window.
func TestLeaseRedis(t *testing.T) {
	t.Parallel()
	testenv.Binary(t, "redis-server")
	pg := testenv.URL(t, postgresEnv)
	redisURL := testenv.URL(t, redisEnv)
	testenv.Redis(t) // answers
	cfg := smallRun(t, modeLease, brokerRedis)
	cfg.postgresURL, cfg.redisURL = pg, redisURL
	cfg.redisRestarts = 2
	f := runChaos(t, cfg)

	require.Equal(t, "lease", f["mode"])
	require.Equal(t, "redis", f["broker"])
	require.Equal(t, 4, num(t, f, "kills"))
	require.Equal(t, 2, num(t, f, "redis_restarts"))
	require.Equal(t, 0, num(t, f, "broker_restarts"), "the shared Redis is never restarted")
	require.Zero(t, num(t, f, "lost"))
	require.Equal(t, num(t, f, "dlq_expected"), num(t, f, "dead_lettered"))
	windows := num(t, f, "windows")
	require.Equal(t, windows, num(t, f, "kills_in_window")+num(t, f, "complete_failed"))
	require.LessOrEqual(t, num(t, f, "window_kills"), num(t, f, "kills"))
	require.LessOrEqual(t, num(t, f, "window_kills"), num(t, f, "kills_in_window"))
	require.LessOrEqual(t, num(t, f, "double_effects"), windows, "every double effect has its window")
	require.Zero(t, num(t, f, "window_violations"))
	require.Equal(t, num(t, f, "pauses"), num(t, f, "fenced"), "every paused consumer's stale Complete was fenced")
	// Whether the pause happens depends on timing: the armed consumer may
	// take nothing before the work runs out (its outage breaker open after
	// a Redis restart, or the others took the rest), and the pause is
	// given up once every operation is settled. The 10,000-operation runs
	// make their pauses (see docs/CHAOS.md).
	if num(t, f, "pauses") == 0 {
		t.Log("no pause happened in this run: no consumer reached its pause point in time")
	}
}

// TestFlagsAreValidated: bad flags are clear errors, before anything runs.
func TestFlagsAreValidated(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-mode", "exactly-once"},
		{"-broker", "kafka"},
		{"-effects", "mysql"},
		{"-ops", "0"},
		{"-consumers", "1"},
		{"-poison", "0.6"},
		{"-mode", "inbox", "-redis-restarts", "1"},
		{"-broker", "rabbitmq", "-broker-restarts", "1"},
		{"extra"},
	} {
		_, err := parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), args)
		require.Error(t, err, "%q", args)
	}
	cfg, err := parseFlags(flag.NewFlagSet("chaos", flag.ContinueOnError), []string{"-ops", "10000", "-mode", "lease"})
	require.NoError(t, err)
	require.Equal(t, 20, cfg.kills, "20 kills per 10,000 ops by default")
	require.Equal(t, 3, cfg.redisRestarts)
	require.Equal(t, 2, cfg.brokerRestarts, "nats is the default broker, embedded and restartable")
}

// TestBadChildConfig: a consumer process given a malformed configuration
// exits with status 2 and says which variable is wrong.
func TestBadChildConfig(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(context.Background(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"={not json")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v", err)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, string(out), childEnv)
}

// TestProblems: the exit status follows the rules of the package doc.
func TestProblems(t *testing.T) {
	t.Parallel()
	ok := result{mode: modeInbox, ops: 100, deadLettered: 1, dlqExpected: 1, settled: true}
	require.Empty(t, ok.problems())

	cases := map[string]func(r *result){
		"lost":                   func(r *result) { r.lost = 1 },
		"not settled":            func(r *result) { r.settled = false },
		"missing dead letter":    func(r *result) { r.deadLettered = 0 },
		"unexpected dead letter": func(r *result) { r.unexpectedDead = 1 },
		"inbox double effect":    func(r *result) { r.double = 1 },
		"lease double beyond its windows": func(r *result) {
			r.mode, r.double, r.windows = modeLease, 3, 2
		},
		"lease key beyond its windows": func(r *result) {
			r.mode, r.double, r.windows, r.windowViolations = modeLease, 1, 2, 1
		},
		"markers disagree": func(r *result) { r.markerMismatch = 1 },
		"pause not fenced": func(r *result) { r.pausesTakenOver, r.fenced = 1, 0 },
	}
	for name, spoil := range cases {
		r := ok
		spoil(&r)
		require.NotEmpty(t, r.problems(), name)
	}
	lease := ok
	lease.mode, lease.double, lease.windows = modeLease, 2, 2
	require.Empty(t, lease.problems(), "lease mode may double an effect once per window")
}
