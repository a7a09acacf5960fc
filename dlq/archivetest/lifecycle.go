package archivetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	dlqenv "github.com/surely-dev/surely/internal/envelope"
)

// testLifecycle walks entries through open → replayed → resolved, failed
// again, discarded and reopened, and checks what Get, List, the filters
// and Stats say at each step.
func testLifecycle(t *testing.T, e *env) {
	f := e.fixtures()
	for _, m := range f {
		got := e.get(m.UUID)
		require.Equal(t, archive.StateOpen, got.State, "a new entry is open")
		require.True(t, got.StateAt.IsZero(), "StateAt of an entry that never left open")
		require.Empty(t, got.Note)
		require.Empty(t, got.FailedAgainAs)
	}
	before := time.Now().Add(-time.Minute)

	// Replayed by run R: state, time, mark.
	n, err := e.a.Mark(e.ctx, archive.Mark{To: archive.StateReplayed, Run: "run-r"}, f[0].UUID, f[1].UUID, "missing", f[0].UUID)
	require.NoError(t, err)
	require.Equal(t, 2, n, "only existing entries count, each once")
	r0 := e.get(f[0].UUID)
	require.Equal(t, archive.StateReplayed, r0.State)
	require.Equal(t, []string{"run-r"}, r0.ReplayedBy)
	require.True(t, r0.StateAt.After(before), "StateAt %v is the archive's clock", r0.StateAt)

	// Resolved (the operation completed) and discarded (with a reason).
	n, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateResolved, Run: "run-r", Note: "record done"}, f[0].UUID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	r0 = e.get(f[0].UUID)
	require.Equal(t, archive.StateResolved, r0.State)
	require.Equal(t, "record done", r0.Note)
	require.Equal(t, []string{"run-r"}, r0.ReplayedBy, "resolving does not add a replay")
	n, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateDiscarded, Note: "card expired, customer told"}, f[2].UUID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d := e.get(f[2].UUID)
	require.Equal(t, archive.StateDiscarded, d.State, "a discarded entry is kept as a tombstone")
	require.Equal(t, "card expired, customer told", d.Note)
	// A copy of a discarded dead letter is counted and leaves it discarded.
	e.publish(f[2])
	d = e.get(f[2].UUID)
	require.Equal(t, archive.StateDiscarded, d.State)
	require.Equal(t, 2, d.Copies)

	// The filters and Stats by state.
	states := func(s ...archive.State) archive.Filter { return archive.Filter{States: s} }
	require.Equal(t, []string{f[3].UUID, f[4].UUID, f[5].UUID}, ids(e.listAll(states(archive.StateOpen), 2)))
	require.Equal(t, []string{f[1].UUID}, ids(e.listAll(states(archive.StateReplayed), 0)))
	require.Equal(t, []string{f[0].UUID, f[1].UUID}, ids(e.listAll(states(archive.StateResolved, archive.StateReplayed), 0)))
	require.Equal(t, []string{f[2].UUID}, ids(e.listAll(states(archive.StateDiscarded), 0)))
	require.Equal(t, []string{f[0].UUID, f[1].UUID}, ids(e.listAll(archive.Filter{ReplayedBy: "run-r"}, 0)))
	require.Empty(t, e.listAll(archive.Filter{ReplayedBy: "run-other"}, 0))
	require.Equal(t, []string{f[1].UUID}, ids(e.listAll(archive.Filter{ReplayedBy: "run-r", States: []archive.State{archive.StateReplayed}}, 0)))
	for _, c := range []archive.Filter{states(archive.StateOpen), states(archive.StateDiscarded), {ReplayedBy: "run-r"}} {
		for _, en := range e.listAll(c, 0) {
			require.True(t, c.Match(en), "List %+v returned %s, which Filter.Match rejects", c, en.ID)
		}
	}
	st, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"open": 3, "replayed": 1, "resolved": 1, "discarded": 1}, st.ByState)
	open, err := e.a.Stats(e.ctx, states(archive.StateOpen))
	require.NoError(t, err)
	require.Equal(t, 3, open.Total)
	require.Equal(t, map[string]int{"open": 3}, open.ByState)

	// Reopened by an operator.
	n, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateOpen, Note: "discarded by mistake"}, f[2].UUID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, archive.StateOpen, e.get(f[2].UUID).State)

	// Refused marks change nothing.
	for name, m := range map[string]archive.Mark{
		"unknown state":            {To: "closed"},
		"replayed without run":     {To: archive.StateReplayed},
		"discarded without reason": {To: archive.StateDiscarded, Note: "  "},
		"run ID with a NUL byte":   {To: archive.StateReplayed, Run: "a\x00b"},
		"note too long":            {To: archive.StateDiscarded, Note: strings.Repeat("é", 1001)},
	} {
		_, err := e.a.Mark(e.ctx, m, f[3].UUID)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
	require.Equal(t, archive.StateOpen, e.get(f[3].UUID).State)
	n, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateResolved})
	require.NoError(t, err)
	require.Zero(t, n, "no IDs")
}

// testFailedAgain: the dead letter of a replayed message that failed
// again (its metadata carries dlq.KeyReplayOf = the entry it replays) is
// a new open entry, and the replayed entry links to it, also when it
// arrives before the replay was marked; the dead letter of a later replay
// that fails again replaces the link.
func testFailedAgain(t *testing.T, e *env) {
	first := envelope(letter{source: "fa-src", reason: dlq.ReasonExhausted, topic: "orders", key: "k-fa", at: base})
	e.publish(first)
	_, err := e.a.Mark(e.ctx, archive.Mark{To: archive.StateReplayed, Run: "run-fa"}, first.UUID)
	require.NoError(t, err)

	// The replayed message, as the run publishes it, dead-lettered again.
	replayed := envelope(letter{source: "fa-src", reason: dlq.ReasonExhausted, topic: "orders", key: "k-fa", at: base.Add(time.Hour),
		md: map[string]string{dlq.KeyReplayOf: first.UUID, dlq.KeyReplayID: "run-fa"}})
	replayed.UUID = dlqenv.DeadLetterUUID("fa-src") + "-again" // a new entry, as dlqenv.DeadLetterID gives it
	e.publish(replayed)

	old := e.get(first.UUID)
	require.Equal(t, replayed.UUID, old.FailedAgainAs, "the replayed entry links to its new dead letter")
	require.Equal(t, archive.StateReplayed, old.State, "it leaves the open count: the failure goes on in the new entry")
	again := e.get(replayed.UUID)
	require.Equal(t, archive.StateOpen, again.State)
	require.Empty(t, again.FailedAgainAs)
	require.Equal(t, []string{replayed.UUID}, ids(e.listAll(archive.Filter{States: []archive.State{archive.StateOpen}}, 0)))
	require.Equal(t, []string{replayed.UUID}, ids(e.listAll(archive.Filter{ReplayID: "run-fa"}, 0)))

	// Replayed once more, and failed again before the mark: the newer
	// dead letter replaces the link, the mark keeps it.
	again2 := envelope(letter{source: "fa-src", reason: dlq.ReasonExhausted, topic: "orders", key: "k-fa", at: base.Add(2 * time.Hour),
		md: map[string]string{dlq.KeyReplayOf: first.UUID, dlq.KeyReplayID: "run-fa2"}})
	again2.UUID = dlqenv.DeadLetterUUID("fa-src") + "-again2"
	e.publish(again2)
	_, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateReplayed, Run: "run-fa2"}, first.UUID)
	require.NoError(t, err)
	old = e.get(first.UUID)
	require.Equal(t, again2.UUID, old.FailedAgainAs)
	require.Equal(t, []string{"run-fa", "run-fa2"}, old.ReplayedBy)

	// A dead letter naming an entry that does not exist links nothing.
	stray := envelope(letter{source: "fa-stray", reason: dlq.ReasonPermanent, at: base,
		md: map[string]string{dlq.KeyReplayOf: "no-such-entry"}})
	e.publish(stray)
	_, err = e.a.Get(e.ctx, "no-such-entry")
	require.ErrorIs(t, err, archive.ErrNotFound)
}

// testListReplays: ListReplays returns every saved run, the most recently
// started first, with its saved fields.
func testListReplays(t *testing.T, e *env) {
	runs, err := e.a.ListReplays(e.ctx)
	require.NoError(t, err)
	require.Empty(t, runs)
	older := archive.ReplayRun{ID: "run-old", State: archive.RunDone, Replayed: 4, Resolved: 3, Refailed: 1,
		Filter: archive.Filter{States: []archive.State{archive.StateOpen}, Topic: "orders"}, Started: base, Updated: base.Add(time.Minute)}
	newer := archive.ReplayRun{ID: "run-new", State: archive.RunCanceled, Filter: archive.Filter{IDs: []string{"a"}},
		Started: base.Add(time.Hour), Updated: base.Add(time.Hour)}
	require.NoError(t, e.a.SaveReplay(e.ctx, older))
	require.NoError(t, e.a.SaveReplay(e.ctx, newer))
	older.Replayed = 5
	require.NoError(t, e.a.SaveReplay(e.ctx, older), "an update is not a new run")
	runs, err = e.a.ListReplays(e.ctx)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	requireRun(t, newer, runs[0])
	requireRun(t, older, runs[1])
}
