package runcancel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/internal/runcancel"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ar, err := memarchive.New()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, r := range []archive.ReplayRun{
		{ID: "running", State: archive.RunRunning, After: 7, Replayed: 3, Started: start, Updated: start},
		{ID: "paused", State: archive.RunPaused, Started: start, Updated: start},
		{ID: "canceled", State: archive.RunCanceled, Started: start, Updated: start},
		{ID: "done", State: archive.RunDone, Started: start, Updated: start},
	} {
		if err := ar.SaveReplay(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	now := start.Add(time.Hour)
	for _, id := range []string{"running", "paused"} {
		was, err := runcancel.Cancel(ctx, ar, id, now)
		if err != nil || string(was.State) != id {
			t.Fatalf("cancel %s: was %s, %v", id, was.State, err)
		}
		run, err := ar.LoadReplay(ctx, id)
		if err != nil || run.State != archive.RunCanceled || !run.Updated.Equal(now) {
			t.Errorf("%s after cancel: %s updated %v (%v), want canceled at %v", id, run.State, run.Updated, err, now)
		}
		if run.After != was.After || run.Replayed != was.Replayed {
			t.Errorf("%s: the cancel moved the cursor or the counters: %+v", id, run)
		}
	}
	if was, err := runcancel.Cancel(ctx, ar, "canceled", now); err != nil || was.State != archive.RunCanceled {
		t.Errorf("cancel of a canceled run: %s, %v", was.State, err)
	}
	if run, _ := ar.LoadReplay(ctx, "canceled"); !run.Updated.Equal(start) {
		t.Error("a canceled run was saved again")
	}
	_, err = runcancel.Cancel(ctx, ar, "done", now)
	if !errors.Is(err, runcancel.ErrDone) || err.Error() != "replay run done is done: nothing to cancel" {
		t.Errorf("cancel of a done run: %v", err)
	}
	if run, _ := ar.LoadReplay(ctx, "done"); run.State != archive.RunDone {
		t.Errorf("a done run became %s", run.State)
	}
	if _, err := runcancel.Cancel(ctx, ar, "nope", now); !errors.Is(err, archive.ErrNotFound) {
		t.Errorf("cancel of an unknown run: %v, want ErrNotFound", err)
	}
}
