package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/testbroker"
)

// childArgs, when set in the environment, makes the test binary run the
// command's main with these arguments (JSON list) instead of the tests:
// a real process, to send it a real SIGINT.
const childArgs = "SURELY_CLI_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgs); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			panic(err)
		}
		os.Args = append([]string{"surely"}, args...)
		main()
		return
	}
	goleak.VerifyTestMain(m,
		// The embedded NATS server and the SQLite driver keep these until exit.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// Sarama's metrics (go-metrics) start a ticker goroutine per
		// process that never ends (a replay to kafka://).
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// TestReplaySIGINT runs the command as a child process, interrupts a slow
// replay with SIGINT, and resumes it: every entry is published once.
func TestReplaySIGINT(t *testing.T) {
	t.Parallel()
	url := testbroker.EmbeddedNATS(t)
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range []string{"orders", "shipments"} {
		require.NoError(t, nats.EnsureStream(ctx, nc, jetstream.StreamConfig{Name: strings.ToUpper(topic), Subjects: []string{topic}}))
	}
	ar, aurl := sqliteArchive(t)
	fill(t, ar)

	// 1 message per second: the first goes at once, the interrupt comes
	// right after it, long before the second.
	args, _ := json.Marshal([]string{"dlq", "replay", "--yes", "--rate", "1/s", "--default-retention", "8760h", "--force"})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+string(args), "SURELY_ARCHIVE_URL="+aurl, "SURELY_BROKER_URL="+url)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	var lines []string
	runID := ""
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if id, ok := strings.CutPrefix(line, "replay run "); ok {
			runID = id
		}
		if strings.HasPrefix(line, "replayed ") && strings.Contains(line, " -> ") {
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			break
		}
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	out := strings.Join(lines, "\n")
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit status: %v\n%s\n%s", err, out, stderr.String())
	assert.Equal(t, exitInterrupted, exit.ExitCode(), "%s\n%s", out, stderr.String())
	require.NotEmpty(t, runID, out)
	assert.Contains(t, out, "resume with: surely dlq replay --resume "+runID)
	assert.Contains(t, stderr.String(), "context canceled")
	assert.Contains(t, stderr.String(), "interrupted, stopping cleanly")

	saved, err := ar.LoadReplay(ctx, runID)
	require.NoError(t, err)
	assert.Equal(t, archive.RunInterrupted, saved.State)
	first := saved.Replayed
	require.GreaterOrEqual(t, first, 1)
	require.Less(t, first, 4, "interrupted before the end")

	a := replayApp(t)
	res, stderrR, code := run(t, a, "dlq", "replay", "--archive", aurl, "--broker", url, "--resume", runID, "--rate", "0", "--json")
	require.Equal(t, 0, code, stderrR)
	var rj replayJSON
	require.NoError(t, json.Unmarshal([]byte(res), &rj))
	assert.Equal(t, 4-first, rj.Replayed, "the rest, once")
	assert.Equal(t, "done", rj.State)
	for _, e := range snapshot(t, ar) {
		assert.Equal(t, []string{runID}, e.ReplayedBy, e.OperationKey)
	}
}
