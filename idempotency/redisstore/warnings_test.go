package redisstore_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// Every persistence level that can lose an acknowledged DONE record warns,
// saying how much; AOF with appendfsync always does not.
func TestDurabilityWarnsEveryLossyLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		warn string // "" for no warning
	}{
		{
			name: "no persistence",
			args: nil,
			warn: "no persistence (no AOF, no RDB): a restart loses all DONE records; duplicates become possible",
		},
		{
			name: "RDB only",
			args: []string{"--save", "3600 1"},
			warn: "no AOF: a restart loses the DONE records written since the last RDB save; duplicates become possible",
		},
		{
			name: "AOF everysec",
			args: []string{"--appendonly", "yes", "--appendfsync", "everysec"},
			warn: "AOF appendfsync everysec: a crash of the Redis process or its machine can lose up to about 2 seconds of acknowledged DONE records; duplicates become possible",
		},
		{
			name: "AOF no",
			args: []string{"--appendonly", "yes", "--appendfsync", "no"},
			warn: "AOF appendfsync no: a crash of the machine loses the acknowledged DONE records the OS has not yet written to disk (typically up to about 30 seconds); duplicates become possible",
		},
		{
			name: "AOF always",
			args: []string{"--appendonly", "yes", "--appendfsync", "always"},
		},
		{
			name: "AOF with CONFIG disabled",
			args: []string{"--appendonly", "yes", "--appendfsync", "always", "--rename-command", "CONFIG", ""},
			warn: "AOF on, appendfsync unknown (CONFIG GET refused): unless it is always, a crash can lose up to about 2 seconds (everysec) or more (no) of acknowledged DONE records; duplicates become possible",
		},
		{
			name: "no AOF with CONFIG disabled",
			args: []string{"--rename-command", "CONFIG", ""},
			warn: "no AOF: a restart loses the DONE records written since the last RDB save, or all of them without save points (CONFIG GET refused); duplicates become possible",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := privateRedis(t, tc.args...)
			logs := &captured{}
			s := newStore(t, c, idempotency.WithLogger(slog.New(logs)))
			require.Equal(t, tc.warn, s.Durability().Warning)
			if tc.warn == "" {
				require.Empty(t, logs.warnings())
			} else {
				require.Equal(t, []string{tc.warn}, logs.warnings())
			}
		})
	}
}

// Without WithLogger the warning goes to slog.Default(): a guarantee
// weaker than the user thinks is never swallowed by a default. Not
// parallel: it replaces the process's default logger while it runs.
func TestDurabilityWarnsByDefault(t *testing.T) {
	_, c := privateRedis(t, "--appendonly", "yes", "--appendfsync", "everysec")
	logs := &captured{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })
	s := newStore(t, c)
	require.NotEmpty(t, s.Durability().Warning)
	require.Equal(t, []string{s.Durability().Warning}, logs.warnings())
}
