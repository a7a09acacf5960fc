package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
)

// The ERROR column of ls shows the cause: an exhausted budget's last
// attempt error, and the end of a long wrapped error, where its root cause is.
func TestClipCause(t *testing.T) {
	cases := []struct{ in, want string }{
		{"card declined", "card declined"},
		{`surely: attempt budget exhausted: key "refund-1" after 3 attempts; last attempt failed: charge refund-1: gateway unavailable`,
			"charge refund-1: gateway unavailable"},
		{"charge order-1: call payments: post https://payments.internal/v2/charges: dial tcp 10.0.0.7:443: connection refused",
			"…ernal/v2/charges: dial tcp 10.0.0.7:443: connection refused"},
		{"line one\n\tline two", "line one line two"},
	}
	for _, c := range cases {
		got := clipCause(c.in, 60)
		if got != c.want {
			t.Errorf("clipCause(%q) = %q, want %q", c.in, got, c.want)
		}
		if n := len([]rune(got)); n > 60 {
			t.Errorf("clipCause(%q) is %d runes, want at most 60", c.in, n)
		}
		if !strings.HasSuffix(c.in, strings.TrimPrefix(got, "…")) && !strings.Contains(c.in, "\n") {
			t.Errorf("clipCause(%q) = %q does not keep the error's end", c.in, got)
		}
	}
}

// Counts say "1 dead letter", "2 dead letters", "1 entry", "3 entries".
func TestPlural(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{plural(0, "dead letter"), "0 dead letters"},
		{plural(1, "dead letter"), "1 dead letter"},
		{plural(2, "statement"), "2 statements"},
		{plurals(1, "entry", "entries"), "1 entry"},
		{plurals(3, "entry", "entries"), "3 entries"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// Every command that only reads (and replay and purge, for scripts) takes
// --json; the commands that write without a report are listed here.
func TestEveryReadCommandHasJSON(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	noJSON := map[string]bool{
		"surely dlq runs cancel": true, // writes one state; its line is the report
		"surely migrate up":      true, // writes the schema
		"surely console":         true, // serves a web page; prints its URL only
		"surely dlq":             true, // groups: they only list their commands
		"surely migrate":         true,
		"surely ops":             true,
	}
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Hidden || strings.HasPrefix(c.CommandPath(), "surely completion") || c.Name() == "help" {
			return
		}
		seen++
		if c.Flags().Lookup("json") == nil && !noJSON[c.CommandPath()] {
			t.Errorf("%s has no --json", c.CommandPath())
		}
	}
	walk(a.rootCmd())
	if seen < 10 {
		t.Fatalf("walked %d commands, want every command of surely", seen)
	}
}

// The common errors say what to do next: which flag or variable to set
// and the URL forms, which schemes a URL may have, what to check when a
// server does not answer or a SQLite file is not there.
func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq", "stats"}, exitUsage, "no archive: pass --archive URL or set SURELY_ARCHIVE_URL (redis://host:6379/0, postgres://"},
		{[]string{"ops", "ls"}, exitUsage, "no store: pass --store URL or set SURELY_STORE_URL (redis://"},
		{[]string{"dlq", "ls", "--archive", "ftp://host/x"}, exitUsage, `unknown scheme "ftp"; the archive URL is one of redis://, postgres://, mysql://, sqlite:PATH`},
		{[]string{"ops", "ls", "--store", "ftp://host/x"}, exitUsage, "the store URL is one of redis://"},
		{[]string{"dlq", "stats", "--archive", "redis://127.0.0.1:1/0"}, exitError, "connection refused (is the server running, and are the URL's host and port right?)"},
		{[]string{"dlq", "stats", "--archive", "sqlite:" + missing}, exitError, "(check the path; surely migrate up creates a new database)"},
		{[]string{"dlq", "replay", "--archive", "mem:fixture", "--yes"}, exitUsage, "no broker to replay to: pass --to URL (or set SURELY_BROKER_URL), one of nats://"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			a, _, _ := testApp(t)
			memFixture(t, a)
			_, stderr, code := run(t, a, tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}
