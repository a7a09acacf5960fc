package replay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
)

// checkInterval is the longest a running replay goes without looking for
// re-failures (on its clock), besides every AbortAfter publishes.
const checkInterval = time.Second

// watchWindow is how many of the latest replayed messages per AbortAfter
// the watcher follows one by one (see the package doc).
const watchWindow = 4

// watcher counts re-failures of the run's replayed messages and decides
// when the run aborts.
type watcher struct {
	r          *runner
	abortAfter int // <= 0: never abort

	mu          sync.Mutex
	cursor      int64     // Seq of the last archived dead letter of this run seen
	pending     []tracked // replayed messages not yet known done or failed, oldest first
	sinceCheck  int       // publishes since the last check
	lastCheck   time.Time
	lastScan    time.Time       // of the archive for dead letters of this run
	counted     map[string]bool // entries whose re-failure was counted
	consecutive int
	refailed    int
}

// tracked is one replayed message the watcher follows.
type tracked struct {
	entryID        string
	namespace, key string    // its dedup record
	fingerprint    string    // the entry's payload fingerprint (surely_fingerprint)
	sent           time.Time // when the replay published it (see replayedDone)
	deadLetter     string    // the UUID its dead letter would have
}

func newWatcher(r *runner) *watcher {
	return &watcher{r: r, abortAfter: r.o.AbortAfter, lastCheck: r.o.Clock.Now(), counted: map[string]bool{}}
}

// start skips the dead letters of this run archived before this call: an
// earlier call counted them already.
func (w *watcher) start(ctx context.Context) error {
	f := archive.Filter{ReplayID: w.r.run.ID}
	for {
		page, err := w.r.archive.List(ctx, f, archive.Page{After: w.cursor, Limit: pageSize})
		if err != nil {
			return fmt.Errorf("replay: list re-failures: %w", err)
		}
		if len(page) > 0 {
			w.cursor = page[len(page)-1].Seq
		}
		if len(page) < pageSize {
			return nil
		}
	}
}

// track follows a message the run published at sent (its clock).
func (w *watcher) track(e archive.Entry, msg *message.Message, sent time.Time) {
	key := e.OperationKey
	if w.r.o.NewKey {
		key = msg.UUID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sinceCheck++
	w.pending = append(w.pending, tracked{entryID: e.ID, namespace: e.Namespace, key: key,
		fingerprint: fingerprintOf(e), sent: sent, deadLetter: envelope.DeadLetterID(msg.UUID, msg.Metadata.Get(dlq.KeyReplayID))})
	if limit := watchWindow * max(w.abortAfter, defaultAbortAfter); len(w.pending) > limit {
		w.pending = append(w.pending[:0:0], w.pending[len(w.pending)-limit:]...)
	}
}

// due reports whether a check should run before the next publish: after
// AbortAfter publishes, or checkInterval, since the last one.
func (w *watcher) due() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sinceCheck == 0 {
		return false
	}
	return w.sinceCheck >= max(w.abortAfter, 1) || w.r.o.Clock.Now().Sub(w.lastCheck) >= checkInterval
}

func (w *watcher) refailedNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refailed
}

func (w *watcher) consecutiveNow() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consecutive
}

// check looks for new re-failures and confirmed successes and reports
// whether the run must abort. For each followed message:
//   - its dedup record (WithStore) DONE by the replayed operation
//     (replayedDone) is a success, EXHAUSTED and reopened by this run a
//     re-failure;
//   - else its dead letter in the archive is a re-failure: the dead letter
//     of a replayed message has the UUID dlq's derived UUID(msg), derived
//     from its UUID and this run's ID, so it is a new entry.
//
// At most once per checkInterval, and on the final check, it also scans
// the archive for new dead letters carrying this run's ID
// (archive.Filter.ReplayID): the re-failures of messages no longer followed.
func (w *watcher) check(ctx context.Context, final bool) (abort bool, err error) {
	pending, cursor, scan := w.begin(final)
	var o outcomes
	o.resolved = map[string]bool{}
	w.follow(ctx, pending, &o)
	if scan {
		cursor, err = w.scan(ctx, cursor, &o)
	}
	abort = w.tally(ctx, final, cursor, o)
	w.markDone(ctx, o.done)
	return abort, err
}

// markDone marks the entries whose replayed operation completed
// resolved, and counts them in the run.
func (w *watcher) markDone(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	n, err := w.r.archive.Mark(ctx, archive.Mark{To: archive.StateResolved, Run: w.r.run.ID, Note: noteDone}, ids...)
	if err != nil {
		w.r.log.WarnContext(ctx, "replay: marking resolved entries failed", "error", err)
	}
	w.r.mu.Lock()
	w.r.run.Resolved += n
	w.r.res.Resolved += n
	w.r.mu.Unlock()
}

// outcomes are what one check learned: the entries whose replayed
// message is no longer followed (its outcome is known), the entries that
// failed again (possibly several times) and the confirmed successes.
type outcomes struct {
	resolved    map[string]bool
	refailedIDs []string
	successes   int
	done        []string // the entries of the successes
}

// begin starts a check: it returns the messages to follow, the scan
// cursor, and whether this check scans the archive.
func (w *watcher) begin(final bool) (pending []tracked, cursor int64, scan bool) {
	now := w.r.o.Clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	pending = append([]tracked(nil), w.pending...)
	scan = final || w.lastScan.IsZero() || now.Sub(w.lastScan) >= checkInterval
	w.sinceCheck = 0
	w.lastCheck = now
	if scan {
		w.lastScan = now
	}
	return pending, w.cursor, scan
}

// follow looks up the outcome of each followed message: its dedup record
// (with a Store; in one read per namespace when it is an
// idempotency.RecordsReader),
// else its dead letter in the archive.
func (w *watcher) follow(ctx context.Context, pending []tracked, o *outcomes) {
	var recs map[string]idempotency.Record
	if w.r.o.Store != nil {
		recs = readRecords(ctx, w.r.o.Store, pending)
	}
	for _, p := range pending {
		if w.followRecord(p, recs, o) {
			continue
		}
		// The dead letter of a replayed message is a new entry (its ID
		// derives from the run): that it exists is the re-failure.
		if _, gerr := w.r.archive.Get(ctx, p.deadLetter); gerr == nil {
			o.refailedIDs = append(o.refailedIDs, p.entryID)
			o.resolved[p.entryID] = true
		}
	}
}

// followRecord looks at p's dedup record (read by follow) and reports
// whether it told p's outcome: DONE by the replayed operation is a
// success, EXHAUSTED and reopened by this run a re-failure. Another DONE
// (a conflict's key held by the other payload, a completion before the
// replay) tells nothing: the dead letter may still come.
func (w *watcher) followRecord(p tracked, recs map[string]idempotency.Record, o *outcomes) bool {
	rec, ok := recs[p.entryID]
	switch {
	case !ok:
		return false
	case replayedDone(rec, p):
		o.successes++
		o.done = append(o.done, p.entryID)
	case rec.State == idempotency.StateExhausted && rec.ReopenedBy == w.r.run.ID:
		o.refailedIDs = append(o.refailedIDs, p.entryID)
	default:
		return false
	}
	o.resolved[p.entryID] = true
	return true
}

// scan lists the archive's new dead letters carrying this run's ID after
// cursor: each is the re-failure of the entry it replays. It returns the
// Seq of the last one seen.
func (w *watcher) scan(ctx context.Context, cursor int64, o *outcomes) (int64, error) {
	f := archive.Filter{ReplayID: w.r.run.ID}
	for {
		page, err := w.r.archive.List(ctx, f, archive.Page{After: cursor, Limit: pageSize})
		if err != nil {
			return cursor, fmt.Errorf("replay: list re-failures: %w", err)
		}
		for _, e := range page {
			cursor = e.Seq
			id := e.ID
			if e.Message != nil && e.Message.Metadata.Get(dlq.KeyReplayOf) != "" {
				id = e.Message.Metadata.Get(dlq.KeyReplayOf)
			}
			o.refailedIDs = append(o.refailedIDs, id)
			o.resolved[id] = true
		}
		if len(page) < pageSize {
			return cursor, nil
		}
	}
}

// tally records what a check learned and reports whether the run must
// abort.
func (w *watcher) tally(ctx context.Context, final bool, cursor int64, o outcomes) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cursor = max(w.cursor, cursor)
	kept := w.pending[:0]
	for _, p := range w.pending {
		if !o.resolved[p.entryID] {
			kept = append(kept, p)
		}
	}
	w.pending = kept
	refails := 0
	for _, id := range o.refailedIDs {
		if !w.counted[id] {
			w.counted[id] = true
			refails++
		}
	}
	if o.successes > 0 {
		w.consecutive = 0
	}
	w.consecutive += refails
	w.refailed += refails
	if refails > 0 || o.successes > 0 {
		w.r.log.InfoContext(ctx, "replay: outcomes of replayed messages", "refailed", refails, "done", o.successes,
			"consecutive_refailures", w.consecutive)
	}
	return !final && w.abortAfter > 0 && w.consecutive >= w.abortAfter
}
