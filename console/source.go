package console

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/runcancel"
)

// source is everything the console asks of the archive and of a replay:
// one small interface, so the archive contract can change behind it.
type source interface {
	get(ctx context.Context, id string) (archive.Entry, error)
	list(ctx context.Context, f archive.Filter, p archive.Page) ([]archive.Entry, error)
	stats(ctx context.Context, f archive.Filter) (archive.Stats, error)
	// arrivals counts the entries dead-lettered per bucket in one query
	// (archive.ArrivalCounter); ok is false for an archive that has none.
	arrivals(ctx context.Context, from time.Time, width time.Duration, n int) (counts []int, ok bool, err error)
	loadRun(ctx context.Context, id string) (archive.ReplayRun, error)
	replay(ctx context.Context, pub message.Publisher, f archive.Filter, opts ...dlq.Option) (result, error)
	resume(ctx context.Context, pub message.Publisher, id string, opts ...dlq.Option) (result, error)
	// discard moves entries to the lifecycle's tombstone, with a reason.
	discard(ctx context.Context, reason string, ids ...string) (int, error)
	// runs lists the replay runs, the most recently started first.
	runs(ctx context.Context) ([]archive.ReplayRun, error)
	// cancel marks run id canceled in the archive, stamped now, as
	// "surely dlq runs cancel" does, and returns the run as it was; a run
	// that is done is refused (runcancel.ErrDone).
	cancel(ctx context.Context, id string, now time.Time) (archive.ReplayRun, error)
	// reconcile settles the outcomes of what run id replayed, reading the
	// dedup records in store (replay.Reconcile).
	reconcile(ctx context.Context, store idempotency.Store, id string) (result, error)
}

// result is what the console reads of a replay call's summary.
type result struct {
	State                                    string
	Replayed, Refused, WouldReplay, Refailed int
	Resolved, Pending                        int
}

func resultOf(r replay.Summary) result {
	return result{State: string(r.State), Replayed: r.Replayed, Refused: r.Refused, WouldReplay: r.WouldReplay, Refailed: r.Refailed,
		Resolved: r.Resolved, Pending: r.Pending}
}

// archiveSource is the source over an archive.Archive as it is.
type archiveSource struct{ ar archive.Archive }

func (s archiveSource) get(ctx context.Context, id string) (archive.Entry, error) {
	e, err := s.ar.Get(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		return e, errNotFound
	}
	return e, err
}

func (s archiveSource) list(ctx context.Context, f archive.Filter, p archive.Page) ([]archive.Entry, error) {
	return s.ar.List(ctx, f, p)
}

func (s archiveSource) stats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	return s.ar.Stats(ctx, f)
}

func (s archiveSource) arrivals(ctx context.Context, from time.Time, width time.Duration, n int) ([]int, bool, error) {
	ac, ok := s.ar.(archive.ArrivalCounter)
	if !ok {
		return nil, false, nil
	}
	counts, err := ac.Arrivals(ctx, from, width, n)
	return counts, true, err
}

func (s archiveSource) loadRun(ctx context.Context, id string) (archive.ReplayRun, error) {
	r, err := s.ar.LoadReplay(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		return r, errNotFound
	}
	return r, err
}

func (s archiveSource) replay(ctx context.Context, pub message.Publisher, f archive.Filter, opts ...dlq.Option) (result, error) {
	r, err := replay.Run(ctx, s.ar, pub, f, opts...)
	return resultOf(r), err
}

func (s archiveSource) resume(ctx context.Context, pub message.Publisher, id string, opts ...dlq.Option) (result, error) {
	r, err := replay.Resume(ctx, s.ar, pub, id, opts...)
	return resultOf(r), err
}

func (s archiveSource) discard(ctx context.Context, reason string, ids ...string) (int, error) {
	return s.ar.Mark(ctx, archive.Mark{To: archive.StateDiscarded, Note: reason}, ids...)
}

func (s archiveSource) runs(ctx context.Context) ([]archive.ReplayRun, error) {
	return s.ar.ListReplays(ctx)
}

func (s archiveSource) cancel(ctx context.Context, id string, now time.Time) (archive.ReplayRun, error) {
	run, err := runcancel.Cancel(ctx, s.ar, id, now)
	if errors.Is(err, archive.ErrNotFound) {
		return run, errNotFound
	}
	return run, err
}

func (s archiveSource) reconcile(ctx context.Context, store idempotency.Store, id string) (result, error) {
	r, err := replay.Reconcile(ctx, s.ar, store, id)
	if errors.Is(err, archive.ErrNotFound) {
		return resultOf(r), errNotFound
	}
	return resultOf(r), err
}
