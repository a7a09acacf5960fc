package main

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/internal/testbroker"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// --older-than and --newer-than read the console's words too: today,
// yesterday, a UTC date or time, on the app's clock.
func TestAgeFlagsReadDaysAndDates(t *testing.T) {
	a, _, _ := testApp(t)
	memFixture(t, a)
	keys := func(args ...string) []string {
		t.Helper()
		out, stderr, code := run(t, a, append([]string{"dlq", "ls", "--archive", "mem:fixture", "--json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var page lsJSON
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		ks := []string{}
		for _, e := range page.Entries {
			ks = append(ks, e.Key)
		}
		return ks
	}
	// fixedNow is 12:00 UTC; the fixture's dead letters are 3h, 2h, 90m
	// and 10m old.
	assert.Equal(t, []string{"order-1", "order-2", "order-3", "parcel-9"}, keys("--newer-than", "today"))
	assert.Empty(t, keys("--older-than", "today"))
	assert.Equal(t, []string{"order-1", "order-2", "order-3", "parcel-9"}, keys("--newer-than", "yesterday"))
	assert.Equal(t, []string{"parcel-9"}, keys("--newer-than", "2026-11-30T11:00"))
	assert.Equal(t, []string{"order-1", "order-2"}, keys("--older-than", "2026-11-30T10:01"))

	_, stderr, code := run(t, a, "dlq", "ls", "--archive", "mem:fixture", "--older-than", "someday")
	assert.Equal(t, exitUsage, code)
	assert.True(t, strings.Contains(stderr, `--older-than: "someday" is not a time: want an age back from now (30m, 1h, 2d, 1d12h), today, yesterday`), stderr)
}

// A replay of every open dead letter asks for --yes, as purge does; a
// filter, IDs, --dry-run or --resume need none.
func TestReplayOfEverythingNeedsYes(t *testing.T) {
	a, _, _ := testApp(t)
	memFixture(t, a)
	rec := &recorder{}
	a.memBrokers["mem://rec"] = rec
	for _, args := range [][]string{{}, {"--state", "open"}, {"--state", "all"}, {"--max", "1"}} {
		out, stderr, code := run(t, a, append([]string{"dlq", "replay", "--archive", "mem:fixture", "--to", "mem://rec", "--rate", "0"}, args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s%s", args, out, stderr)
		assert.Contains(t, stderr, "replay of every", args)
		assert.Contains(t, stderr, "--yes", args)
		assert.Contains(t, stderr, "--dry-run", args)
		assert.Empty(t, out, args)
	}
	assert.Empty(t, rec.uuids(), "a refused replay published")

	out, stderr, code := run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--to", "mem://rec", "--rate", "0", "--dry-run")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "would replay 4")
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--to", "mem://rec", "--rate", "0", "--topic", "shipments")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 1,")
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--to", "mem://rec", "--rate", "0", "--yes")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 3,")
}

// failingBroker refuses every publish.
type failingBroker struct{}

func (failingBroker) Publish(string, ...*message.Message) error {
	return errors.New("broker says no (publish 42)")
}
func (failingBroker) Close() error { return nil }

// A replay's error is printed once (on stderr), not also in the summary.
func TestReplayErrorPrintedOnce(t *testing.T) {
	a, _, _ := testApp(t)
	memFixture(t, a)
	a.memBrokers["mem://down"] = failingBroker{}
	out, stderr, code := run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--to", "mem://down", "--rate", "0", "--topic", "orders")
	assert.NotEqual(t, 0, code)
	assert.Equal(t, 1, strings.Count(out+stderr, "broker says no (publish 42)"), "stdout:\n%s\nstderr:\n%s", out, stderr)
	assert.Contains(t, stderr, "broker says no (publish 42)")
	assert.Contains(t, out, "resume with: surely dlq replay --resume run-0001")
}

// A publish to a NATS subject no JetStream stream takes fails with "no
// response from stream": the error stays, and a hint says the stream is
// probably missing and how to create it.
func TestReplayToNATSWithoutStreamHints(t *testing.T) {
	url := testbroker.EmbeddedNATS(t)
	ar, aurl := sqliteArchive(t)
	fill(t, ar)
	a := replayApp(t)
	out, stderr, code := run(t, a, "dlq", "replay", "--archive", aurl, "--to", url, "--rate", "0", "--topic", "orders", "--default-retention", "8760h")
	assert.Equal(t, exitError, code, "%s%s", out, stderr)
	assert.Contains(t, stderr, "no response from stream", "the error stays")
	assert.Contains(t, stderr, `no JetStream stream seems to take subject "orders"`)
	assert.Contains(t, stderr, "nats stream add ORDERS --subjects orders")
	assert.Contains(t, out, "resume with: surely dlq replay --resume run-0001")
}

// A mysql:// or mariadb:// URL in the URL form (user:pass@host:port/db)
// reaches the database: the CLI converts it to the driver's DSN.
func TestMySQLURLFormReachesTheDatabase(t *testing.T) {
	t.Parallel()
	_ = testsql.MySQL(t) // skips (or fails under SURELY_REQUIRE_SERVICES) without a server
	dsn := testenv.URL(t, "SURELY_MYSQL_URL")
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	prefix := "ux_" + randomName()
	t.Cleanup(func() { dropTables("mysql", dsn, prefix) })
	user := url.User(cfg.User)
	if cfg.Passwd != "" {
		user = url.UserPassword(cfg.User, cfg.Passwd)
	}
	u := (&url.URL{Scheme: "mariadb", User: user, Host: cfg.Addr, Path: "/" + cfg.DBName, RawQuery: "prefix=" + prefix}).String()
	a, _, _ := testApp(t)
	_, stderr, code := run(t, a, "migrate", "up", "--archive", u)
	require.Equal(t, 0, code, stderr)
	out, stderr, code := run(t, a, "dlq", "ls", "--archive", u)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "no dead letter")
}

// A MySQL URL neither form reads is a usage error showing the forms.
func TestMySQLURLMalformedShowsTheForms(t *testing.T) {
	a, _, _ := testApp(t)
	_, stderr, code := run(t, a, "dlq", "ls", "--archive", "mysql://root@tcp(127.0.0.1:3306/test")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "want mysql://user:pass@host:3306/db or mysql://user:pass@tcp(host:3306)/db")
}
