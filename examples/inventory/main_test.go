package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/internal/testbroker"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var summaryRE = regexp.MustCompile(`^summary: reservations=(\d+) unique=(\d+) stock_decrements=(\d+) lost=(\d+) double_effects=(\d+) kills=(\d+)$`)

// TestReserveInventorySurvivesKills runs the example end to end on the
// servers of SURELY_POSTGRES_URL and SURELY_NATS_URL: the parent in this
// test process, the consumer children from the example built into a
// temporary directory.
func TestReserveInventorySurvivesKills(t *testing.T) {
	t.Parallel()
	_ = testsql.Postgres(t) // skips (or fails, services required) without it
	pgURL := testenv.URL(t, postgresEnv)
	natsURL := testbroker.NATS(t)

	goTool, err := exec.LookPath("go") // go test puts its own GOROOT/bin first on PATH
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "inventory")
	build := exec.CommandContext(t.Context(), goTool, "build", "-o", bin, ".")
	msg, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", msg)

	var out bytes.Buffer
	err = run(t.Context(), config{postgresURL: pgURL, natsURL: natsURL, kills: 7, child: bin, out: &out})
	t.Log("\n" + out.String())
	require.NoError(t, err)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	m := summaryRE.FindStringSubmatch(lines[len(lines)-1])
	require.NotNil(t, m, "the last line is the summary")
	v := func(i int) int {
		n, err := strconv.Atoi(m[i])
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 200, v(1), "reservations")
	require.Equal(t, 170, v(2), "unique")
	require.Equal(t, v(2), v(3), "stock_decrements == unique")
	require.Zero(t, v(4), "lost")
	require.Zero(t, v(5), "double_effects")
	require.GreaterOrEqual(t, v(6), 5, "kills")
	for _, point := range []string{pointBeforeEffect, pointInTx, pointAfterCommit} {
		require.Contains(t, out.String(), "SIGKILL at "+point+",", "a kill at each crash point")
	}
}

func TestBatchAndPlan(t *testing.T) {
	t.Parallel()
	b := makeBatch("x")
	require.Len(t, b.messages, 200)
	require.Len(t, b.unique, 180)
	require.Len(t, b.unknown, 10)
	require.Equal(t, 20, b.resent)
	require.Equal(t, 170, b.valid())
	seen := map[string]int{}
	for _, r := range b.messages {
		seen[r.ID]++
		require.Equal(t, b.unique[r.ID], r, "a resent reservation has the same payload")
		if seen[r.ID] > 1 {
			require.False(t, b.unknown[r.ID], "unknown-SKU reservations are sent once")
		}
	}

	p := plan(minKills)
	require.Equal(t, []string{pointBeforeEffect, "", pointInTx, "", pointAfterCommit}, p)
}

func TestUnreachableServersFailInOneLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(t.Context(), config{
		postgresURL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
		natsURL:     "nats://127.0.0.1:1",
		kills:       minKills, child: "/nonexistent", out: &out,
	})
	require.ErrorContains(t, err, "needs PostgreSQL")
	require.Empty(t, out.String())

	_, err = connectNATS("nats://127.0.0.1:1")
	require.ErrorContains(t, err, "needs NATS with JetStream")

	err = run(t.Context(), config{kills: minKills - 1, out: &out})
	require.ErrorContains(t, err, "at least")
}
