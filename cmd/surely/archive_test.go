package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// archiveCase is an archive backend the commands are tested against: it
// returns the --archive URL of an empty archive of its own, and the archive
// itself (to fill and to check).
type archiveCase struct {
	name string
	open func(t *testing.T, a *app) (string, archive.Archive)
}

func memCase() archiveCase {
	return archiveCase{"mem", func(t *testing.T, a *app) (string, archive.Archive) {
		ar := memFixture(t, a)
		return "mem:fixture", ar
	}}
}

// testArchiveCommands runs ls, stats, show and purge against one backend.
func testArchiveCommands(t *testing.T, c archiveCase) {
	t.Helper()
	a, _, _ := testApp(t)
	url, ar := c.open(t, a)
	if c.name != "mem" {
		fill(t, ar)
	}
	ctx := context.Background()

	// stats
	out, stderr, code := run(t, a, "dlq", "stats", "--archive", url, "--json")
	require.Equal(t, 0, code, stderr)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, 4, st.Total)
	assert.Equal(t, map[string]int{"exhausted": 2, "permanent": 1, "panic": 1}, st.ByReason)
	assert.Equal(t, map[string]int{"orders": 3, "shipments": 1}, st.ByTopic)
	assert.Equal(t, map[string]int{"charge-payments": 3, "book-courier": 1}, st.ByHandler)
	assert.Equal(t, map[string]int{"*main.netError": 2, "*errors.errorString": 2}, st.ByErrorType)
	assert.Equal(t, "3h0m0s", st.OldestAge)
	assert.Equal(t, "10m0s", st.NewestAge)

	// ls with each filter, and paging
	ls := func(args ...string) lsJSON {
		t.Helper()
		out, stderr, code := run(t, a, append([]string{"dlq", "ls", "--archive", url, "--json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var page lsJSON
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		return page
	}
	keys := func(p lsJSON) []string {
		var ks []string
		for _, e := range p.Entries {
			ks = append(ks, e.Key)
		}
		return ks
	}
	assert.Equal(t, []string{"order-1", "order-2", "order-3", "parcel-9"}, keys(ls()))
	assert.Equal(t, []string{"order-1", "order-3"}, keys(ls("--reason", "exhausted")))
	assert.Equal(t, []string{"parcel-9"}, keys(ls("--topic", "shipments")))
	assert.Equal(t, []string{"parcel-9"}, keys(ls("--handler", "book-courier")))
	assert.Equal(t, []string{"order-1", "order-3"}, keys(ls("--error", "connection refused")))
	assert.Equal(t, []string{"order-2"}, keys(ls("--key", "order-2")))
	assert.Equal(t, []string{"order-1", "order-2"}, keys(ls("--older-than", "100m")))
	assert.Equal(t, []string{"order-3", "parcel-9"}, keys(ls("--newer-than", "100m")))
	assert.Equal(t, []string{"order-2", "order-3"}, keys(ls("--newer-than", "150m", "--older-than", "1h")))
	assert.Empty(t, keys(ls("--topic", "nothing")))
	p1 := ls("--limit", "3")
	assert.Equal(t, []string{"order-1", "order-2", "order-3"}, keys(p1))
	require.NotEmpty(t, p1.Next)
	p2 := ls("--limit", "3", "--after", p1.Next)
	assert.Equal(t, []string{"parcel-9"}, keys(p2))
	assert.Empty(t, p2.Next, "last page")
	first := p1.Entries[0]
	assert.Equal(t, "11111111-1111-4111-8111-111111111111", first.OriginalUUID)
	assert.Equal(t, 3, first.Attempts)

	// show: the envelope decoded, a binary payload flagged
	out, stderr, code = run(t, a, "dlq", "show", first.ID, "--archive", url, "--json")
	require.Equal(t, 0, code, stderr)
	var sh showJSON
	require.NoError(t, json.Unmarshal([]byte(out), &sh))
	assert.Equal(t, "order-1", sh.Key)
	assert.Equal(t, "*fmt.wrapError > *main.netError", sh.ErrorTypes)
	require.Len(t, sh.History, 3)
	assert.Equal(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa02", sh.History[1].TraceID)
	assert.Equal(t, "worker-1", sh.Host)
	assert.Equal(t, map[string]string{"content-type": "application/json", "idempotency_key": "order-1"}, sh.Metadata)
	assert.Equal(t, payloadView{Bytes: 32, Encoding: "text", Data: `{"order":1,"amount":"10.00 EUR"}`}, sh.Payload)
	bin := ls("--key", "parcel-9").Entries[0]
	out, stderr, code = run(t, a, "dlq", "show", bin.ID, "--archive", url)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "payload (5 bytes, NOT valid UTF-8, base64):\nAP/+cGI=\n")
	_, stderr, code = run(t, a, "dlq", "show", "00000000-0000-0000-0000-000000000000", "--archive", url)
	assert.Equal(t, exitNotFound, code, stderr)

	// purge: refused without --yes, nothing removed
	out, stderr, code = run(t, a, "dlq", "purge", "--archive", url, "--reason", "exhausted")
	assert.Equal(t, exitRefused, code, stderr)
	assert.Contains(t, out, "2 dead letters would be removed; nothing was removed (add --yes)")
	assert.Contains(t, out, first.ID)
	assert.Len(t, ls().Entries, 4)
	// with --yes it discards exactly the selection and lists it
	out, stderr, code = run(t, a, "dlq", "purge", "--archive", url, "--reason", "exhausted", "--yes", "--why", "gateway gone", "--json")
	require.Equal(t, 0, code, stderr)
	var pr purgeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &pr))
	assert.Equal(t, 2, pr.Removed)
	assert.Equal(t, []string{"order-1", "order-3"}, keys(lsJSON{Entries: pr.Entries}))
	assert.Equal(t, []string{"order-2", "parcel-9"}, keys(ls()))
	assert.Equal(t, []string{"order-1", "order-3"}, keys(ls("--state", "discarded")))
	tomb, err := ar.Get(ctx, first.ID)
	require.NoError(t, err, "a discarded entry is kept as a tombstone")
	assert.Equal(t, archive.StateDiscarded, tomb.State)
	assert.Equal(t, "gateway gone", tomb.Note)
	// by ID, for good
	out, stderr, code = run(t, a, "dlq", "purge", "--archive", url, "--yes", "--hard", bin.ID)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "deleted 1 dead letter for good")
	assert.Equal(t, []string{"order-2"}, keys(ls()))
	_, err = ar.Get(ctx, bin.ID)
	require.ErrorIs(t, err, archive.ErrNotFound)
	// --all
	_, _, code = run(t, a, "dlq", "purge", "--archive", url, "--all", "--yes", "--why", "cleanup")
	require.Equal(t, 0, code)
	assert.Empty(t, ls().Entries)
	out, _, code = run(t, a, "dlq", "stats", "--archive", url)
	require.Equal(t, 0, code)
	assert.Equal(t, "dead letters: 0 (open)\n", out)
	assert.Len(t, ls("--state", "discarded").Entries, 3)
}

func TestArchiveCommandsMem(t *testing.T) {
	t.Parallel()
	testArchiveCommands(t, memCase())
}

func sqliteCase() archiveCase {
	return archiveCase{"sqlite", func(t *testing.T, _ *app) (string, archive.Archive) {
		path := filepath.Join(t.TempDir(), "dlq.db")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		ar, err := sqlarchive.New(db, sqlstore.SQLite, archive.WithPrefix("cli_dlq"))
		require.NoError(t, err)
		require.NoError(t, ar.Migrate(context.Background()))
		return "sqlite:" + path + "?prefix=cli_dlq", ar
	}}
}

func redisCase() archiveCase {
	return archiveCase{"redis", func(t *testing.T, _ *app) (string, archive.Archive) {
		client := testenv.Redis(t)
		url := testenv.URL(t, "SURELY_REDIS_URL")
		prefix := "surely-cli-test:" + uuid.NewString()[:8]
		t.Cleanup(func() {
			ctx := context.Background()
			keys, _ := client.Keys(ctx, "{"+prefix+"}*").Result()
			if len(keys) > 0 {
				client.Del(ctx, keys...)
			}
		})
		ar, err := redisarchive.New(client, archive.WithPrefix(prefix))
		require.NoError(t, err)
		return url + "?prefix=" + prefix, ar
	}}
}

func postgresCase() archiveCase {
	return archiveCase{"postgres", func(t *testing.T, _ *app) (string, archive.Archive) {
		db := testsql.Postgres(t)
		url := testenv.URL(t, "SURELY_POSTGRES_URL")
		prefix := "cli_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		ar, err := sqlarchive.New(db, sqlstore.Postgres, archive.WithPrefix(prefix))
		require.NoError(t, err)
		require.NoError(t, ar.Migrate(context.Background()))
		t.Cleanup(func() {
			for _, tbl := range []string{prefix + "_entries", prefix + "_replayed", prefix + "_runs", prefix + "_counts"} {
				_, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+tbl+`"`)
			}
		})
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		return url + sep + "prefix=" + prefix, ar
	}}
}

func TestArchiveCommandsSQLite(t *testing.T) {
	t.Parallel()
	testArchiveCommands(t, sqliteCase())
}

func TestArchiveCommandsRedis(t *testing.T) {
	t.Parallel()
	testArchiveCommands(t, redisCase())
}

func TestArchiveCommandsPostgres(t *testing.T) {
	t.Parallel()
	testArchiveCommands(t, postgresCase())
}

func TestSQLiteArchiveWithoutTables(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "empty.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	require.NoError(t, db.PingContext(context.Background()))
	require.NoError(t, db.Close())
	a, _, _ := testApp(t)
	_, stderr, code := run(t, a, "dlq", "ls", "--archive", "sqlite:"+path)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "no such table")
	_, stderr, code = run(t, a, "dlq", "ls", "--archive", "sqlite:"+path+"?prefix=Bad-Prefix")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "prefix")
}
