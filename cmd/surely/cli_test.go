package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
)

func TestHelpGolden(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{
		{}, {"dlq"}, {"dlq", "stats"}, {"dlq", "ls"}, {"dlq", "show"},
		{"dlq", "replay"}, {"dlq", "purge"}, {"dlq", "runs"}, {"dlq", "runs", "show"}, {"dlq", "runs", "cancel"}, {"inspect"},
		{"ops"}, {"ops", "ls"}, {"migrate"}, {"migrate", "status"}, {"migrate", "up"},
	} {
		name := "help_" + strings.Join(append([]string{"surely"}, path...), "_")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, _, _ := testApp(t)
			stdout, stderr, code := run(t, a, append(path, "--help")...)
			require.Equal(t, 0, code, stderr)
			golden(t, name, stdout)
		})
	}
}

func TestRootHelpListsCommands(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	out, _, code := run(t, a, "--help")
	require.Equal(t, 0, code)
	for _, c := range []string{"dlq stats", "dlq ls", "dlq show", "dlq replay", "dlq runs", "dlq purge", "inspect KEY", "ops ls", "migrate status|up", "completion"} {
		assert.Contains(t, out, "surely "+c, c)
	}
	out, _, code = run(t, a, "dlq", "--help")
	require.Equal(t, 0, code)
	for _, c := range []string{"stats", "ls", "show", "replay", "runs", "purge"} {
		assert.Contains(t, out, "\n  "+c+" ", c)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, "unknown command"},
		{[]string{"dlq", "ls", "--bogus"}, "unknown flag"},
		{[]string{"dlq", "ls", "--archive", "mem:fixture", "--limit", "0"}, "--limit 0"},
		{[]string{"dlq", "ls", "--archive", "mem:fixture", "--reason", "tired"}, `--reason "tired"`},
		{[]string{"dlq", "ls", "--archive", "mem:fixture", "--older-than", "someday"}, "is not a time"},
		{[]string{"dlq", "ls", "--archive", "mem:fixture", "--after", "x"}, "--after"},
		{[]string{"dlq", "ls", "--archive", "ftp://host/x"}, "unknown scheme"},
		{[]string{"dlq", "ls"}, "no archive"},
		{[]string{"dlq", "show"}, "one dead-letter ID"},
		{[]string{"dlq", "stats", "extra"}, "takes no arguments"},
		{[]string{"dlq", "purge", "--archive", "mem:fixture"}, "needs a filter"},
		{[]string{"ops", "ls", "--store", "mem:s", "--state", "stuck"}, "--state"},
		{[]string{"dlq", "stat"}, "Did you mean this?\n\tstats"},
		{[]string{"inspect", "k", "--namespace", "a:b", "--store", "mem:s"}, "namespace"},
		{[]string{"inspect", "--namespace", "n"}, "one operation key"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			a, _, _ := testApp(t)
			memFixture(t, a)
			_, stderr, code := run(t, a, tc.args...)
			assert.Equal(t, exitUsage, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

func TestEnvironmentAndFlagPrecedence(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	memFixture(t, a)
	env := map[string]string{"SURELY_ARCHIVE_URL": "mem:fixture"}
	a.env = func(k string) string { return env[k] }
	out, stderr, code := run(t, a, "dlq", "stats")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "dead letters: 4")
	// The flag wins over the environment.
	_, stderr, code = run(t, a, "dlq", "stats", "--archive", "mem:other")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "mem: archives exist only")
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	memFixture(t, a)
	_, stderr, code := run(t, a, "dlq", "show", "no-such-id", "--archive", "mem:fixture")
	assert.Equal(t, exitNotFound, code, stderr)
	assert.Contains(t, stderr, "not found")
}

func TestJSONGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stats_json", []string{"dlq", "stats", "--json"}},
		{"stats_text", []string{"dlq", "stats"}},
		{"stats_topic_json", []string{"dlq", "stats", "--topic", "orders", "--older-than", "100m", "--json"}},
		{"ls_json", []string{"dlq", "ls", "--json"}},
		{"ls_text", []string{"dlq", "ls"}},
		{"ls_page1_json", []string{"dlq", "ls", "--limit", "2", "--json"}},
		{"ls_page1_text", []string{"dlq", "ls", "--limit", "2"}},
		{"ls_page2_json", []string{"dlq", "ls", "--limit", "2", "--after", "2", "--json"}},
		{"ls_error_json", []string{"dlq", "ls", "--error", "connection refused", "--json"}},
		{"ls_all_text", []string{"dlq", "ls", "--state", "all"}},
		{"stats_all_json", []string{"dlq", "stats", "--state", "all", "--json"}},
		{"show_json", []string{"dlq", "show", "--json", dlqID("11111111-1111-4111-8111-111111111111")}},
		{"show_text", []string{"dlq", "show", dlqID("11111111-1111-4111-8111-111111111111")}},
		{"show_binary_text", []string{"dlq", "show", dlqID("44444444-4444-4444-8444-444444444444")}},
		{"show_binary_json", []string{"dlq", "show", "--json", dlqID("44444444-4444-4444-8444-444444444444")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, _, _ := testApp(t)
			memFixture(t, a)
			out, stderr, code := run(t, a, append(tc.args, "--archive", "mem:fixture")...)
			require.Equal(t, 0, code, stderr)
			golden(t, tc.name, out)
		})
	}
}

// newRootCmd is the command tree as a library: run in-process with any
// writers and environment.
func TestNewRootCmd(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	cmd := newRootCmd(&stdout, &stderr, func(k string) string {
		return map[string]string{"SURELY_ARCHIVE_URL": "sqlite:/nonexistent/dlq.db"}[k]
	})
	cmd.SetArgs([]string{"dlq", "stats"})
	err := cmd.Execute()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sqlite:/nonexistent/dlq.db")
	assert.Equal(t, exitError, exitCode(err))

	cmd = newRootCmd(&stdout, &stderr, nil)
	cmd.SetArgs([]string{"inspect", "--help"})
	require.NoError(t, cmd.Execute())
	assert.Contains(t, stdout.String(), "attempt ledger")
}

// A failed write of the output is an error, not a silent success.
func TestOutputWriteError(t *testing.T) {
	t.Parallel()
	a := newApp(failingWriter{}, &strings.Builder{}, nil)
	a.memArchives = map[string]archive.Archive{}
	memFixture(t, a)
	code := execute(context.Background(), a, []string{"dlq", "stats", "--archive", "mem:fixture"})
	assert.Equal(t, exitError, code)
	assert.Contains(t, a.stderr.(*stickyWriter).w.(*strings.Builder).String(), "broken pipe")
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }
