package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// lifecycleApp is a test app on the in-memory fixture with a recording
// broker (mem://rec) and a clock that moves (the rate limiter needs it).
func lifecycleApp(t *testing.T) (*app, archive.Archive, *recorder) {
	t.Helper()
	a := replayApp(t)
	ar := memFixture(t, a)
	rec := &recorder{}
	a.memBrokers["mem://rec"] = rec
	return a, ar, rec
}

func statsOf(t *testing.T, a *app, args ...string) statsJSON {
	t.Helper()
	out, stderr, code := run(t, a, append([]string{"dlq", "stats", "--archive", "mem:fixture", "--json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

func lsOf(t *testing.T, a *app, args ...string) []entryJSON {
	t.Helper()
	out, stderr, code := run(t, a, append([]string{"dlq", "ls", "--archive", "mem:fixture", "--json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var page lsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	return page.Entries
}

func keysOf(es []entryJSON) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

// stats and ls count and list the open entries unless --state says
// otherwise; a replayed entry leaves the open count.
func TestStatsAndLsByState(t *testing.T) {
	t.Parallel()
	a, _, rec := lifecycleApp(t)
	require.Equal(t, 4, statsOf(t, a).Total)

	out, stderr, code := run(t, a, "dlq", "replay", "2", "--archive", "mem:fixture", "--broker", "mem://rec", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 1, refused 0")
	require.Len(t, rec.uuids(), 1)

	open := statsOf(t, a)
	assert.Equal(t, 3, open.Total)
	assert.Equal(t, "open", open.State)
	assert.Equal(t, map[string]int{"open": 3}, open.ByState)
	assert.Equal(t, 1, statsOf(t, a, "--state", "replayed").Total)
	all := statsOf(t, a, "--state", "all")
	assert.Equal(t, 4, all.Total)
	assert.Equal(t, map[string]int{"open": 3, "replayed": 1}, all.ByState)

	assert.Equal(t, []string{"order-1", "order-3", "parcel-9"}, keysOf(lsOf(t, a)))
	replayed := lsOf(t, a, "--state", "replayed")
	require.Len(t, replayed, 1)
	assert.Equal(t, "order-2", replayed[0].Key)
	assert.Equal(t, "replayed", replayed[0].State)
	assert.Equal(t, []string{"run-0001"}, replayed[0].ReplayedBy)
	assert.Len(t, lsOf(t, a, "--state", "all"), 4)
	assert.Empty(t, lsOf(t, a, "--state", "resolved"))

	out, _, code = run(t, a, "dlq", "ls", "--archive", "mem:fixture", "--state", "replayed")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "STATE")
	assert.Contains(t, out, "replayed")
	out, _, code = run(t, a, "dlq", "stats", "--archive", "mem:fixture", "--state", "resolved")
	require.Equal(t, 0, code)
	assert.Equal(t, "dead letters: 0 (resolved)\n", out)

	_, stderr, code = run(t, a, "dlq", "ls", "--archive", "mem:fixture", "--state", "closed")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, `--state "closed"`)

	// A second replay of the default selection does not replay it again.
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--broker", "mem://rec", "--dry-run")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "would replay 3")
}

// replay, show and purge take the full ID, the short ID ls prints and
// the SEQ number.
func TestEntryReferences(t *testing.T) {
	t.Parallel()
	a, _, rec := lifecycleApp(t)
	id1, id4 := dlqID("11111111-1111-4111-8111-111111111111"), dlqID("44444444-4444-4444-8444-444444444444")

	out, _, code := run(t, a, "dlq", "ls", "--archive", "mem:fixture")
	require.Equal(t, 0, code)
	assert.Contains(t, out, shortID(id1)+" ")
	assert.NotContains(t, out, id1, "ls prints the short ID")

	for _, ref := range []string{id1, shortID(id1), "1"} {
		out, stderr, code := run(t, a, "dlq", "show", ref, "--archive", "mem:fixture", "--json")
		require.Equal(t, 0, code, "%s: %s", ref, stderr)
		var sh showJSON
		require.NoError(t, json.Unmarshal([]byte(out), &sh))
		assert.Equal(t, id1, sh.ID, ref)
		assert.Equal(t, "open", sh.State)
	}
	for _, ref := range []string{"99", "deadbeef", "00000000-0000-0000-0000-000000000000"} {
		_, stderr, code := run(t, a, "dlq", "show", ref, "--archive", "mem:fixture")
		assert.Equal(t, exitNotFound, code, "%s: %s", ref, stderr)
	}

	// Replay by ID and SEQ, whatever the state filter would say.
	out, stderr, code := run(t, a, "dlq", "replay", shortID(id4), "1", "--archive", "mem:fixture", "--broker", "mem://rec", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 2, refused 0")
	assert.Equal(t, []string{"11111111-1111-4111-8111-111111111111", "44444444-4444-4444-8444-444444444444"}, rec.uuids())
	out, stderr, code = run(t, a, "dlq", "replay", id1, "--archive", "mem:fixture", "--broker", "mem://rec", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 1", "a replayed entry named by its ID is replayed again")
	_, stderr, code = run(t, a, "dlq", "replay", "77", "--archive", "mem:fixture", "--broker", "mem://rec")
	assert.Equal(t, exitNotFound, code, stderr)
	_, stderr, code = run(t, a, "dlq", "replay", "1", "--resume", "run-0001", "--archive", "mem:fixture", "--broker", "mem://rec")
	assert.Equal(t, exitUsage, code, stderr)

	// Purge by SEQ: discarded with the reason, kept as a tombstone.
	_, stderr, code = run(t, a, "dlq", "purge", "3", "--archive", "mem:fixture", "--yes")
	assert.Equal(t, exitUsage, code, "a discard needs --why")
	assert.Contains(t, stderr, "--why")
	out, stderr, code = run(t, a, "dlq", "purge", "3", "--archive", "mem:fixture", "--yes", "--why", "refunded by hand")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "discarded 1 dead letter ")
	d := lsOf(t, a, "--state", "discarded")
	require.Len(t, d, 1)
	assert.Equal(t, "order-3", d[0].Key)
	assert.Equal(t, "refunded by hand", d[0].Note)
	assert.Equal(t, []string{"order-2"}, keysOf(lsOf(t, a)), "open: what was neither replayed nor discarded")
	out, stderr, code = run(t, a, "dlq", "purge", "3", "--archive", "mem:fixture", "--yes", "--hard")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "deleted 1 dead letter for good")
	assert.Empty(t, lsOf(t, a, "--state", "discarded"))
}

// completeRecord makes the store's record of (ns, key) DONE, as the
// consumer does when it processes the replayed message.
func completeRecord(t *testing.T, st idempotency.Store, ns, key string) {
	t.Helper()
	ctx := context.Background()
	res, err := st.Claim(ctx, idempotency.ClaimRequest{Namespace: ns, Key: key, Fingerprint: fixtureFingerprint, Lease: time.Minute, MaxAttempts: 5})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, st.Complete(ctx, res.Lease, idempotency.Outcome{}))
}

// A run, its entries resolved once the consumer processed them (runs show
// --store), and the failed-again entries.
func TestRunsAndRunsShow(t *testing.T) {
	t.Parallel()
	a, ar, rec := lifecycleApp(t)
	// On the fixture's clock: the completing attempts begin after the
	// replay marked the entries (fixedNow-1m on the archive's clock).
	st, err := memstore.New(idempotency.WithClock(func() time.Time { return fixedNow }))
	require.NoError(t, err)
	a.memStores["st"] = st
	// The consumer fails parcel-9 again; the others it processes later.
	rec.onPublish = func(_ int, topic string, m *message.Message) {
		if m.Metadata.Get(idempotency.DefaultMetadataKey) != "parcel-9" {
			return
		}
		env := dlq.Wrap(m, dlq.Failure{Reason: dlq.ReasonPanic, Err: errors.New("panic again"), Attempts: 5,
			OperationKey: "parcel-9", Topic: topic, Handler: "book-courier", Retention: 24 * time.Hour, At: fixedNow}, nil, "worker-1", "payments")
		require.NoError(t, ar.Publish("dead", env))
	}
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", "mem:fixture", "--broker", "mem://rec", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "replayed 4")
	open := lsOf(t, a)
	require.Len(t, open, 1, "only the new dead letter of the re-failure is open")
	assert.Equal(t, "parcel-9", open[0].Key)

	completeRecord(t, st, "charge-payments", "order-1")
	completeRecord(t, st, "charge-payments", "order-2")

	out, stderr, code = run(t, a, "dlq", "runs", "show", "run-0001", "--archive", "mem:fixture", "--store", "mem:st", "--json")
	require.Equal(t, 0, code, stderr)
	var show runShowJSON
	require.NoError(t, json.Unmarshal([]byte(out), &show), out)
	require.NotNil(t, show.Reconciled)
	assert.Equal(t, 2, show.Reconciled.Resolved)
	assert.Equal(t, 1, show.Reconciled.Pending, "order-3 is not processed yet")
	assert.Equal(t, "done", show.State)
	assert.Equal(t, 4, show.Replayed)
	assert.Equal(t, 2, show.Resolved)
	outcomes := map[string]string{}
	for _, e := range show.Entries {
		outcomes[e.Key] = e.Outcome
	}
	assert.Equal(t, map[string]string{"order-1": "resolved", "order-2": "resolved", "order-3": "pending", "parcel-9": "failed_again"}, outcomes)
	assert.Equal(t, 2, statsOf(t, a, "--state", "resolved").Total)

	// Text, and once more: nothing left to resolve but order-3.
	completeRecord(t, st, "charge-payments", "order-3")
	out, stderr, code = run(t, a, "dlq", "runs", "show", "run-0001", "--archive", "mem:fixture", "--store", "mem:st")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "checked in the store: 1 resolved now, 0 still pending")
	assert.Contains(t, out, "replayed 4, refused 0, failed again 1, resolved 3")
	assert.Contains(t, out, "failed_again")

	out, stderr, code = run(t, a, "dlq", "runs", "--archive", "mem:fixture", "--json")
	require.Equal(t, 0, code, stderr)
	var runs map[string][]runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs["runs"], 1)
	r := runs["runs"][0]
	assert.Equal(t, "run-0001", r.ID)
	assert.Equal(t, "done", r.State)
	assert.Equal(t, 3, r.Resolved)
	assert.Equal(t, "--state open", r.Filter)
	out, _, code = run(t, a, "dlq", "runs", "--archive", "mem:fixture")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "RUN")
	assert.Contains(t, out, "run-0001")

	_, stderr, code = run(t, a, "dlq", "runs", "show", "run-9999", "--archive", "mem:fixture")
	assert.Equal(t, exitNotFound, code, stderr)
}

// A run canceled while it runs stops at its next message, exits 130 and
// is resumed: every entry is published once.
func TestRunsCancelAndResume(t *testing.T) {
	t.Parallel()
	a, ar, rec := lifecycleApp(t)
	rec.onPublish = func(n int, _ string, _ *message.Message) {
		if n != 1 {
			return
		}
		// Another process: surely dlq runs cancel run-0001.
		other := replayApp(t)
		other.memArchives["fixture"] = ar
		out, stderr, code := run(t, other, "dlq", "runs", "cancel", "run-0001", "--archive", "mem:fixture")
		assert.Equal(t, 0, code, stderr)
		assert.Contains(t, out, "canceled (was running)")
	}
	out, stderr, code := run(t, a, "dlq", "replay", "--yes", "--archive", "mem:fixture", "--broker", "mem://rec", "--rate", "0")
	assert.Equal(t, exitInterrupted, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, "state canceled")
	assert.Contains(t, out, "resume with: surely dlq replay --resume run-0001")
	published := len(rec.uuids())
	assert.Less(t, published, 4, "stopped early")
	saved, err := ar.LoadReplay(context.Background(), "run-0001")
	require.NoError(t, err)
	assert.Equal(t, archive.RunCanceled, saved.State)

	rec.onPublish = nil
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--broker", "mem://rec", "--resume", "run-0001", "--rate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "state done")
	assert.ElementsMatch(t, originalUUIDs(fixtureFailures()), rec.uuids(), "every entry once")

	out, stderr, code = run(t, a, "dlq", "runs", "cancel", "run-0001", "--archive", "mem:fixture")
	assert.Equal(t, exitRefused, code, "%s %s", out, stderr)
	assert.Contains(t, stderr, "is done")
	_, stderr, code = run(t, a, "dlq", "runs", "cancel", "nope", "--archive", "mem:fixture")
	assert.Equal(t, exitNotFound, code, stderr)
}
