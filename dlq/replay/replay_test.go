package replay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/archivekit"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/middleware"
)

// A replayed message is the original one: payload, UUID, metadata without
// the envelope, plus the replay's keys; every entry is marked and the run
// saved done.
func TestRunRepublishesTheOriginal(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	deadLetters(t, a, 3, 2, entrySpec{topic: "payments", retention: time.Hour})
	pub := &recorder{clock: c}

	res, err := replay.Run(t.Context(), a, pub, archive.Filter{Topic: "orders"}, on(c, replay.WithID("run-1"))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, res.State)
	require.Equal(t, 3, res.Replayed)
	require.Zero(t, res.Refused)

	got := pub.all()
	require.Len(t, got, 3)
	for i, p := range got {
		src := source(i)
		require.Equal(t, "orders", p.topic)
		require.Equal(t, src.UUID, p.msg.UUID, "the original UUID")
		require.Equal(t, src.Payload, p.msg.Payload)
		want := message.Metadata{
			idempotency.DefaultMetadataKey: src.Metadata.Get(idempotency.DefaultMetadataKey),
			"tenant":                       "acme",
			dlq.KeyReplayOf:                ids[i],
			dlq.KeyReplayID:                "run-1",
			dlq.KeyReplayLink:              "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		}
		require.Equal(t, want, p.msg.Metadata, "original metadata without the envelope, plus the replay's keys")

		e, err := a.Get(t.Context(), ids[i])
		require.NoError(t, err)
		require.Equal(t, []string{"run-1"}, e.ReplayedBy)
	}
	run, err := a.LoadReplay(t.Context(), "run-1")
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, run.State)
	require.Equal(t, 3, run.Replayed)
	last, err := a.Get(t.Context(), ids[2])
	require.NoError(t, err)
	require.Equal(t, last.Seq, run.After)
	require.Equal(t, "orders", run.Filter.Topic)

	// The same ID cannot start a second run.
	_, err = replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("run-1"))...)
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	// A second run replays the same entries again, to Target.
	res, err = replay.Run(t.Context(), a, pub, archive.Filter{IDs: ids[:1]},
		on(c, replay.WithID("run-2"), replay.WithTarget("orders-retry"))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	got = pub.all()
	require.Equal(t, "orders-retry", got[3].topic)
	require.Equal(t, "run-2", got[3].msg.Metadata.Get(dlq.KeyReplayID))
}

// NewKey mints a new UUID, written as the key in the metadata the default
// extractor reads, derived from run and entry; it is logged.
func TestRunNewKey(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 2, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	var logs bytes.Buffer
	_, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("run-nk"), replay.WithNewKey(""), dlq.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	require.NoError(t, err)
	got := pub.all()
	require.Len(t, got, 2)
	for i, p := range got {
		key := replay.NewKeyFor("run-nk", ids[i])
		require.Equal(t, key, p.msg.UUID)
		require.NotEqual(t, source(i).UUID, p.msg.UUID)
		require.Equal(t, key, p.msg.Metadata.Get(idempotency.DefaultMetadataKey))
		require.Equal(t, "acme", p.msg.Metadata.Get("tenant"))
	}
	require.Contains(t, logs.String(), "NewKey")

	// Another metadata key.
	_, err = replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("run-nk2"), replay.WithNewKey("op"))...)
	require.NoError(t, err)
	got = pub.all()[2:]
	require.Equal(t, replay.NewKeyFor("run-nk2", ids[0]), got[0].msg.Metadata.Get("op"))
	require.Equal(t, "op-0", got[0].msg.Metadata.Get(idempotency.DefaultMetadataKey), "the old key is left alone")
}

// Publishes are spaced 1/Rate apart on the clock, the first at once.
func TestRunRate(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 6, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	// Concurrency 1: a publish starts at its slot and ends before the
	// next Sleep moves the fake clock (the limiter alone is tested with
	// concurrent callers in limiter_test.go).
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithRate(20))...)
	require.NoError(t, err)
	got := pub.all()
	require.Len(t, got, 6)
	times := make([]time.Duration, len(got))
	for i, p := range got {
		times[i] = p.at.Sub(t0)
	}
	// With the fake clock a publish is recorded at the time of its slot
	// (Sleep moves the clock; the publish takes no clock time).
	require.Equal(t, time.Duration(0), times[0], "first publish at once")
	require.ElementsMatch(t, []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond,
		150 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond}, times)
	require.InDelta(t, 20, res.Rate, 0.001)
	require.Equal(t, t0, res.First)
	require.Equal(t, t0.Add(250*time.Millisecond), res.Last)
}

// Max bounds one call; Resume continues with the next entries.
func TestRunMaxThenResume(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 5, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("r"), replay.WithMax(2))...)
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	require.Equal(t, archive.RunPaused, res.State, "entries are left")

	res, err = replay.Resume(t.Context(), a, pub, "r", on(c, replay.WithMax(2))...)
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	res, err = replay.Resume(t.Context(), a, pub, "r", on(c)...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, archive.RunDone, res.State)
	counts := pub.countByReplayOf()
	require.Len(t, counts, 5)
	for _, id := range ids {
		require.Equal(t, 1, counts[id], id)
	}
	run, err := a.LoadReplay(t.Context(), "r")
	require.NoError(t, err)
	require.Equal(t, 5, run.Replayed)

	_, err = replay.Resume(t.Context(), a, pub, "unknown", on(c)...)
	require.ErrorIs(t, err, archive.ErrNotFound)
}

// The retention guard refuses entries older than their dedup retention
// (envelope, else DefaultRetention) or of unknown retention, unless Force.
func TestRunRetentionGuard(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	fresh := deadLetters(t, a, 0, 1, entrySpec{retention: time.Hour, at: t0.Add(-30 * time.Minute)})
	old := deadLetters(t, a, 1, 1, entrySpec{retention: time.Hour, at: t0.Add(-2 * time.Hour)})
	noRet := deadLetters(t, a, 2, 1, entrySpec{at: t0.Add(-2 * time.Hour)})
	pub := &recorder{clock: c}
	var progress []replay.Progress
	var logs bytes.Buffer
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("guard"), dlq.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			replay.WithProgress(func(p replay.Progress) { progress = append(progress, p) }))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, 2, res.Refused)
	require.Equal(t, fresh[0], pub.all()[0].msg.Metadata.Get(dlq.KeyReplayOf))
	require.Len(t, progress, 3)
	byID := map[string]replay.Progress{}
	for _, p := range progress {
		byID[p.EntryID] = p
	}
	require.Equal(t, replay.ActionReplayed, byID[fresh[0]].Action)
	require.Equal(t, replay.ActionRefused, byID[old[0]].Action)
	require.Contains(t, byID[old[0]].Reason, "longer than the dedup retention 1h0m0s")
	require.Equal(t, replay.ActionRefused, byID[noRet[0]].Action)
	require.Contains(t, byID[noRet[0]].Reason, "unknown")
	require.Equal(t, 3, progress[2].Done)
	require.Equal(t, 3, progress[2].Total)
	require.Contains(t, logs.String(), "refused")
	e, err := a.Get(t.Context(), old[0])
	require.NoError(t, err)
	require.Empty(t, e.ReplayedBy, "a refused entry is not marked")
	run, err := a.LoadReplay(t.Context(), "guard")
	require.NoError(t, err)
	require.Equal(t, 2, run.Refused)
	last, err := a.Get(t.Context(), noRet[0])
	require.NoError(t, err)
	require.Equal(t, last.Seq, run.After, "the cursor moves past refused entries")

	// DefaultRetention covers the entry without one: 3h > 2h, replayed;
	// the old one is still refused.
	pub2 := &recorder{clock: c}
	res, err = replay.Run(t.Context(), a, pub2, archive.Filter{},
		on(c, replay.WithID("guard-2"), replay.WithDefaultRetention(3*time.Hour))...)
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	require.Equal(t, 1, res.Refused)

	// As time passes, the fresh one ages out too.
	c.Advance(time.Hour)
	res, err = replay.Run(t.Context(), a, &recorder{clock: c}, archive.Filter{}, on(c, replay.WithID("guard-3"))...)
	require.NoError(t, err)
	require.Zero(t, res.Replayed)
	require.Equal(t, 3, res.Refused)

	// Force replays everything, and logs each override.
	logs.Reset()
	pub3 := &recorder{clock: c}
	res, err = replay.Run(t.Context(), a, pub3, archive.Filter{},
		on(c, replay.WithID("guard-4"), replay.WithForce(), dlq.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	require.NoError(t, err)
	require.Equal(t, 3, res.Replayed)
	require.Zero(t, res.Refused)
	require.Len(t, pub3.all(), 3)
	require.Equal(t, 3, strings.Count(logs.String(), "forced past the retention guard"))
	run, err = a.LoadReplay(t.Context(), "guard-4")
	require.NoError(t, err)
	require.True(t, run.Force)
}

// A dry run decides every entry and changes nothing: no publish, no mark,
// no saved run.
func TestRunDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	old := deadLetters(t, a, 3, 1, entrySpec{retention: time.Hour, at: t0.Add(-2 * time.Hour)})
	before := snapshot(t, a)
	pub := &recorder{clock: c}
	var progress []replay.Progress
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("dry"), replay.WithDryRun(), replay.WithMax(2),
			replay.WithProgress(func(p replay.Progress) { progress = append(progress, p) }))...)
	require.NoError(t, err)
	require.Empty(t, pub.all(), "nothing published")
	require.Equal(t, 2, res.WouldReplay)
	require.Zero(t, res.Replayed)
	require.Empty(t, res.State)
	require.Equal(t, before, snapshot(t, a), "the archive is untouched")
	_, err = a.LoadReplay(t.Context(), "dry")
	require.ErrorIs(t, err, archive.ErrNotFound, "no run saved")

	require.Len(t, progress, 2)
	require.Equal(t, replay.ActionWouldReplay, progress[0].Action)
	require.Equal(t, ids[0], progress[0].EntryID)
	require.Equal(t, "orders", progress[0].Topic)

	progress = nil
	res, err = replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("dry"), replay.WithDryRun(), replay.WithProgress(func(p replay.Progress) { progress = append(progress, p) }))...)
	require.NoError(t, err)
	require.Equal(t, 3, res.WouldReplay)
	require.Equal(t, 1, res.Refused)
	require.Len(t, progress, 4)
	require.Equal(t, replay.ActionWouldRefuse, progress[3].Action)
	require.Equal(t, old[0], progress[3].EntryID)
	require.Contains(t, progress[3].Reason, "retention")
	require.Empty(t, pub.all())
}

// A run canceled mid-way and resumed publishes every entry exactly once;
// while it ran with Concurrency > 1, the saved cursor never passed an
// entry whose publish had not finished.
func TestRunInterruptedAndResumed(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 60, entrySpec{retention: time.Hour})
	seqOf := map[string]int64{}
	for _, id := range ids {
		e, err := a.Get(t.Context(), id)
		require.NoError(t, err)
		seqOf[id] = e.Seq
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var n atomic.Int32
	var mu sync.Mutex
	finished := map[int64]bool{}
	pub := &recorder{clock: c, hook: func(p published) error {
		// Publishes finish out of order.
		if n.Add(1)%3 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		if n.Load() == 25 {
			cancel()
		}
		return nil
	}}
	checked := 0
	progress := func(p replay.Progress) {
		if p.Action != replay.ActionReplayed {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		finished[p.Seq] = true
		// The saved cursor covers only finished publishes.
		run, err := a.LoadReplay(context.Background(), "resumable")
		if err != nil {
			return
		}
		for _, id := range ids {
			if s := seqOf[id]; s <= run.After && !finished[s] {
				t.Errorf("cursor %d passed entry %d whose publish has not finished", run.After, s)
			}
		}
		checked++
	}
	res, err := replay.Run(ctx, a, pub, archive.Filter{},
		on(c, replay.WithID("resumable"), replay.WithConcurrency(4), replay.WithProgress(progress))...)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, archive.RunInterrupted, res.State)
	require.GreaterOrEqual(t, res.Replayed, 25)
	require.Less(t, res.Replayed, 60)
	require.Positive(t, checked)
	run, err := a.LoadReplay(t.Context(), "resumable")
	require.NoError(t, err)
	require.Equal(t, archive.RunInterrupted, run.State)
	require.Equal(t, res.Replayed, run.Replayed)

	pub.hook = nil
	res, err = replay.Resume(t.Context(), a, pub, "resumable", on(c, replay.WithConcurrency(4))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, res.State)
	counts := pub.countByReplayOf()
	require.Len(t, counts, 60)
	for _, id := range ids {
		require.Equal(t, 1, counts[id], "entry %s published once in total", id)
	}
	run, err = a.LoadReplay(t.Context(), "resumable")
	require.NoError(t, err)
	require.Equal(t, 60, run.Replayed)
	require.Equal(t, seqOf[ids[59]], run.After)
}

// A slow publish holds the cursor back while later entries finish.
func TestRunCursorWaitsForSlowPublish(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 6, entrySpec{retention: time.Hour})
	first, err := a.Get(t.Context(), ids[0])
	require.NoError(t, err)
	release := make(chan struct{})
	pub := &recorder{clock: c, hook: func(p published) error {
		if p.msg.Metadata.Get(dlq.KeyReplayOf) == ids[1] {
			<-release
		}
		return nil
	}}
	var mu sync.Mutex
	others := 0
	othersDone := make(chan struct{})
	progress := func(p replay.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.EntryID != ids[1] {
			others++
			if others == 5 {
				close(othersDone) // every other publish finished; the second one still blocks
			}
		}
	}
	// Progress is reported before a publish's cursor is saved: wait for the
	// saves (bounded), then check the cursor stopped before the blocked entry.
	checked, ran := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(release)
		defer close(checked)
		select {
		case <-othersDone:
		case <-ran:
			t.Error("the run ended before the other publishes finished")
			return
		}
		var after int64
		for range 1000 {
			run, err := a.LoadReplay(context.Background(), "slow")
			if err != nil {
				t.Errorf("load run: %v", err)
				return
			}
			if after = run.After; after >= first.Seq {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if after != first.Seq {
			t.Errorf("cursor %d, want %d (the blocked entry's predecessor)", after, first.Seq)
		}
	}()
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("slow"), replay.WithConcurrency(6), replay.WithProgress(progress))...)
	close(ran)
	<-checked
	require.NoError(t, err)
	require.Equal(t, 6, res.Replayed)
	last, err := a.Get(t.Context(), ids[5])
	require.NoError(t, err)
	require.Equal(t, last.Seq, res.After)
}

// A publish error stops the run, saved interrupted; Resume publishes the
// failed entry and the rest, each once.
func TestRunPublishErrorThenResume(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 5, entrySpec{retention: time.Hour})
	broken := errors.New("broker unavailable")
	var calls atomic.Int32
	pub := &recorder{clock: c, hook: func(published) error {
		if calls.Add(1) == 3 {
			return broken
		}
		return nil
	}}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("err"))...)
	require.ErrorIs(t, err, broken)
	require.Equal(t, archive.RunInterrupted, res.State)
	require.Equal(t, 2, res.Replayed)
	second, err := a.Get(t.Context(), ids[1])
	require.NoError(t, err)
	require.Equal(t, second.Seq, res.After)

	res, err = replay.Resume(t.Context(), a, pub, "err", on(c)...)
	require.NoError(t, err)
	require.Equal(t, 3, res.Replayed)
	counts := pub.countByReplayOf()
	for _, id := range ids {
		require.Equal(t, 1, counts[id], id)
	}
}

// refailing is a consumer stand-in: each replayed message it receives is
// dead-lettered again into the archive (as the dead-letter step would).
func refailing(t *testing.T, a archive.Archive, fail func(p published) bool) func(p published) error {
	return func(p published) error {
		if !fail(p) {
			return nil
		}
		env := dlq.Wrap(p.msg, dlq.Failure{
			Reason: dlq.ReasonExhausted, Err: errors.New("still down"), Topic: p.topic,
			OperationKey: p.msg.Metadata.Get(idempotency.DefaultMetadataKey), Namespace: "reserve",
			Retention: time.Hour, At: t0,
		}, nil, "host-1", "group-1")
		require.NoError(t, a.Publish("dead-letters", env))
		return nil
	}
}

// K consecutive re-failures abort the run, with the original key and with
// NewKey: either way the re-failure is a new entry carrying the run's ID.
func TestRunAbortsAfterConsecutiveRefailures(t *testing.T) {
	t.Parallel()
	for _, newKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("NewKey=%v", newKey), func(t *testing.T) {
			t.Parallel()
			c := newFakeClock()
			a := newArchive(t, c)
			deadLetters(t, a, 0, 10, entrySpec{retention: time.Hour})
			pub := &recorder{clock: c}
			pub.hook = refailing(t, a, func(published) bool { return true })
			opts := on(c, replay.WithID("abort"), replay.WithAbortAfter(3))
			if newKey {
				opts = append(opts, replay.WithNewKey(""))
			}
			res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, opts...)
			require.ErrorIs(t, err, replay.ErrAborted)
			require.Equal(t, archive.RunAborted, res.State)
			require.Equal(t, 3, res.Replayed, "stopped before the 4th publish")
			require.Equal(t, 3, res.Refailed)
			run, err := a.LoadReplay(t.Context(), "abort")
			require.NoError(t, err)
			require.Equal(t, archive.RunAborted, run.State)
			require.Equal(t, 3, run.Refailed)

			// Resuming counts only new re-failures: it aborts again after 3 more.
			res, err = replay.Resume(t.Context(), a, pub, "abort", on(c, replay.WithAbortAfter(3))...)
			require.ErrorIs(t, err, replay.ErrAborted)
			require.Equal(t, 3, res.Replayed)
			require.Equal(t, 3, res.Refailed)
			require.Len(t, pub.all(), 6)
		})
	}
}

// Re-failures are not counted as consecutive across a confirmed success
// (a DONE record in the store); a negative AbortAfter never aborts.
func TestRunSuccessResetsConsecutiveRefailures(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 12, entrySpec{retention: time.Hour})
	store, err := memstore.New(idempotency.WithClock(c.Now)) // the run's clock: one clock
	require.NoError(t, err)
	// The dead-lettered operations' EXHAUSTED records: the retention guard
	// reads them (a missing record is refused).
	exhausted := func(first int) { seedExhausted(t, store, first, 12) }
	exhausted(0)
	// The consumer: odd orders fail again (EXHAUSTED, dead-lettered), even
	// ones succeed (DONE).
	var i atomic.Int32
	fail := func(published) bool { return i.Add(1)%2 == 1 }
	dead := refailing(t, a, func(published) bool { return true })
	consume := func(p published) error {
		req := idempotency.ClaimRequest{Namespace: "reserve", Key: p.msg.Metadata.Get(idempotency.DefaultMetadataKey),
			Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1, Reopen: p.msg.Metadata.Get(dlq.KeyReplayID)}
		res, err := store.Claim(context.Background(), req)
		if err != nil || res.Status != idempotency.Acquired {
			return fmt.Errorf("claim: %v: %w", res.Status, err)
		}
		if fail(p) {
			if err := store.Release(context.Background(), res.Lease, idempotency.Failure{Error: "still down", Final: true}); err != nil {
				return err
			}
			return dead(p)
		}
		return store.Complete(context.Background(), res.Lease, idempotency.Outcome{})
	}
	pub := &recorder{clock: c, hook: consume}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("mixed"), replay.WithAbortAfter(2), replay.WithStore(store))...)
	require.NoError(t, err, "failures alternate with successes: never 2 in a row")
	require.Equal(t, archive.RunDone, res.State)
	require.Equal(t, 12, res.Replayed)
	require.Equal(t, 6, res.Refailed)

	// Every replayed message fails: the same rail aborts.
	a2 := newArchive(t, c)
	deadLetters(t, a2, 100, 12, entrySpec{retention: time.Hour})
	exhausted(100)
	fail = func(published) bool { return true }
	dead = refailing(t, a2, func(published) bool { return true })
	res, err = replay.Run(t.Context(), a2, pub, archive.Filter{},
		on(c, replay.WithID("all-fail"), replay.WithAbortAfter(2), replay.WithStore(store))...)
	require.ErrorIs(t, err, replay.ErrAborted)
	require.Equal(t, 2, res.Replayed)

	// AbortAfter < 0: never.
	a3 := newArchive(t, c)
	deadLetters(t, a3, 200, 12, entrySpec{retention: time.Hour})
	exhausted(200)
	dead = refailing(t, a3, func(published) bool { return true })
	res, err = replay.Run(t.Context(), a3, pub, archive.Filter{},
		on(c, replay.WithID("never"), replay.WithAbortAfter(-1), replay.WithStore(store))...)
	require.NoError(t, err)
	require.Equal(t, 12, res.Replayed)
	require.Equal(t, 12, res.Refailed)
}

// Bad options are refused before anything happens.
func TestRunInvalidOptions(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 1, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	for name, o := range map[string][]dlq.Option{
		"negative rate":        {replay.WithRate(-1)},
		"negative concurrency": {replay.WithConcurrency(-1)},
		"negative max":         {replay.WithMax(-1)},
		"negative retention":   {replay.WithDefaultRetention(-time.Second)},
		"control byte in ID":   {replay.WithID("run\n1")},
		"ID too long":          {replay.WithID(strings.Repeat("r", defaults.MaxKeyLen+1))},
		"envelope key":         {replay.WithNewKey(dlq.KeyReplayID)},
		"empty target":         {replay.WithTarget("")},
		"nil store":            {replay.WithStore(nil)},
		"nil progress":         {replay.WithProgress(nil)},
		"nil tracer provider":  {replay.WithTracerProvider(nil)},
		"nil logger":           {dlq.WithLogger(nil)},
		"an archive's option":  {dlq.WithRetention(time.Hour)},
	} {
		_, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, o...)...)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
	_, err := replay.Run(t.Context(), nil, pub, archive.Filter{})
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	_, err = replay.Run(t.Context(), a, nil, archive.Filter{})
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	_, err = replay.Resume(t.Context(), a, pub, "")
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	// What the saved run fixes cannot be given to Resume.
	for name, o := range map[string]dlq.Option{
		"ID":      replay.WithID("other"),
		"target":  replay.WithTarget("t"),
		"new key": replay.WithNewKey(""),
		"force":   replay.WithForce(),
	} {
		_, err = replay.Resume(t.Context(), a, pub, "run-1", on(c, o)...)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
		require.ErrorContains(t, err, "replay.Resume does not take option", name)
	}
	require.Empty(t, pub.all())
	_, err = a.LoadReplay(t.Context(), "run\n1")
	require.ErrorIs(t, err, archive.ErrNotFound)
}

// Entries that cannot be replayed as they are get refused with a reason:
// no topic, no original UUID.
func TestRunRefusesIncompleteEntries(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	noTopic := message.NewMessage("plain-1", []byte("x")) // not an envelope
	require.NoError(t, a.Publish("dead-letters", noTopic))
	var reasons []string
	pub := &recorder{clock: c}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithForce(), replay.WithProgress(func(p replay.Progress) { reasons = append(reasons, p.Reason) }))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Refused)
	require.Contains(t, reasons[0], "no original topic")

	res, err = replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithForce(), replay.WithTarget("t"), replay.WithProgress(func(p replay.Progress) { reasons = append(reasons, p.Reason) }))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Refused)
	require.Contains(t, reasons[1], "no original UUID")
	require.Empty(t, pub.all())
}

// snapshot lists every entry of a without its message (whose channels
// differ per copy): what a replay could change.
func snapshot(t *testing.T, a archive.Archive) []archive.Entry {
	t.Helper()
	es, err := a.List(t.Context(), archive.Filter{}, archive.Page{Limit: 1000})
	require.NoError(t, err)
	for i := range es {
		es[i].Message = nil
	}
	return es
}

// The interplay with the dedup step: a message whose record is EXHAUSTED
// runs again when replayed (a fresh budget for the run), a redelivered copy
// of it does not reopen the record again, and a later replay of the
// completed operation is acked as a duplicate without running.
func TestReplayReopensExhaustedRecord(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	store, err := memstore.New(idempotency.WithClock(c.Now)) // the run's clock: one clock
	require.NoError(t, err)
	dedup, err := middleware.Dedup(store, "reserve", middleware.WithMaxAttempts(1))
	require.NoError(t, err)
	runs := 0
	failing := true
	h := dedup(func(*message.Message) ([]*message.Message, error) {
		runs++
		if failing {
			return nil, errors.New("warehouse down")
		}
		return nil, nil
	})

	// The first delivery fails and spends the budget; the next one is
	// refused as exhausted and dead-lettered into the archive.
	src := source(7)
	_, err = h(archivekit.CopyMessage(src))
	require.Error(t, err)
	_, err = h(archivekit.CopyMessage(src))
	fe, final := dlq.AsFinal(err)
	require.True(t, final)
	require.Equal(t, dlq.ReasonExhausted, fe.Reason)
	require.NoError(t, a.Publish("dead-letters", dlq.Wrap(src, dlq.Failure{Reason: dlq.ReasonExhausted, Err: fe.Err,
		Topic: "orders", Namespace: "reserve", OperationKey: "op-7", Retention: defaults.Retention, At: t0}, nil, "", "")))
	require.Equal(t, 1, runs)

	// The downstream is back. The replayed message runs again, once.
	failing = false
	var results []error
	deliver := func(p published) error {
		_, err := h(archivekit.CopyMessage(p.msg))
		results = append(results, err)
		return nil
	}
	res, err := replay.Run(t.Context(), a, &recorder{clock: c, hook: func(p published) error {
		require.NoError(t, deliver(p))
		return deliver(p) // and the broker delivers it a second time
	}}, archive.Filter{}, on(c, replay.WithID("run-1"))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, []error{nil, nil}, results)
	require.Equal(t, 2, runs, "the replay ran the handler once; its redelivery was a duplicate")
	rec, err := store.Get(t.Context(), "reserve", "op-7")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, "run-1", rec.ReopenedBy)
	require.Equal(t, 1, rec.BudgetBase)
	require.Equal(t, 2, rec.Attempts, "the attempt counter keeps growing")

	// Replaying the completed operation again is a duplicate: acked, not run.
	results = nil
	_, err = replay.Run(t.Context(), a, &recorder{clock: c, hook: deliver}, archive.Filter{},
		on(c, replay.WithID("run-2"))...)
	require.NoError(t, err)
	require.Equal(t, []error{nil}, results)
	require.Equal(t, 2, runs)
}
