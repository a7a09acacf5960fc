// Package runcancel cancels a replay run the way dlq/replay reads a
// cancel: by saving it in the archive with State archive.RunCanceled. A
// Run or Resume call running it, in any process, reads the run before
// each save and stops before its next publish. "surely dlq runs cancel"
// and the console's cancel share it.
package runcancel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/surely-dev/surely/dlq/archive"
)

// ErrDone is the error of a cancel of a run that is done: every entry it
// selected was handled, nothing is left to stop. Cancel's error reads
// "replay run ID is done: nothing to cancel".
var ErrDone = errors.New("is done: nothing to cancel")

// Cancel marks the run id of ar canceled, stamped now, and returns the
// run as it was before. A run already canceled is left as it is (the
// returned run's State is archive.RunCanceled, the error nil); a run that
// is done is refused with ErrDone; an unknown ID is an error wrapping
// archive.ErrNotFound.
//
// Cancel saves the run it has just read, with the cancel, and nothing
// else: a call running the run reads the run before each of its saves
// (dlq/replay), keeps the cancel and writes its own cursor and counters
// again. The archive has no compare-and-swap: a call running the run that
// reads it just before the cancel is saved, and saves just after,
// overwrites the cancel; and a save of that call between Cancel's read and
// write is overwritten until its next save. Its process's own stop (the
// console cancels its context) does not depend on the archive.
func Cancel(ctx context.Context, ar archive.Archive, id string, now time.Time) (archive.ReplayRun, error) {
	run, err := ar.LoadReplay(ctx, id)
	if err != nil {
		return run, fmt.Errorf("replay run %s: %w", id, err)
	}
	switch run.State {
	case archive.RunDone:
		return run, fmt.Errorf("replay run %s %w", id, ErrDone)
	case archive.RunCanceled:
		return run, nil
	}
	was := run
	run.State, run.Updated = archive.RunCanceled, now
	if err := ar.SaveReplay(ctx, run); err != nil {
		return was, fmt.Errorf("cancel run %s: %w", id, err)
	}
	return was, nil
}
