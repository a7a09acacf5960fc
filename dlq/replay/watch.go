package replay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
	namespace, key string // its dedup record
	deadLetter     string // the UUID its dead letter would have
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

// track follows a message the run just published.
func (w *watcher) track(e archive.Entry, msg *message.Message) {
	key := e.OperationKey
	if w.r.o.NewKey {
		key = msg.UUID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sinceCheck++
	w.pending = append(w.pending, tracked{entryID: e.ID, namespace: e.Namespace, key: key,
		deadLetter: envelope.DeadLetterID(msg)})
	if limit := watchWindow * max(w.abortAfter, DefaultAbortAfter); len(w.pending) > limit {
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
//   - its dedup record (WithStore) DONE is a success, EXHAUSTED and
//     reopened by this run a re-failure;
//   - else its dead letter in the archive is a re-failure: the dead letter
//     of a replayed message has the UUID dlq's derived UUID(msg), derived
//     from its UUID and this run's ID, so it is a new entry.
//
// At most once per checkInterval, and on the final check, it also scans
// the archive for new dead letters carrying this run's ID
// (archive.Filter.ReplayID): the re-failures of messages no longer followed.
func (w *watcher) check(ctx context.Context, final bool) (abort bool, err error) {
	now := w.r.o.Clock.Now()
	w.mu.Lock()
	pending := append([]tracked(nil), w.pending...)
	cursor := w.cursor
	scan := final || w.lastScan.IsZero() || now.Sub(w.lastScan) >= checkInterval
	w.sinceCheck = 0
	w.lastCheck = now
	if scan {
		w.lastScan = now
	}
	w.mu.Unlock()

	resolved := map[string]bool{}
	var refailedIDs []string
	successes := 0
	for _, p := range pending {
		if st := w.r.o.Store; st != nil && p.namespace != "" && p.key != "" {
			rec, gerr := st.Get(ctx, p.namespace, p.key)
			if gerr == nil && rec.State == idempotency.StateDone {
				successes++
				resolved[p.entryID] = true
				continue
			}
			if gerr == nil && rec.State == idempotency.StateExhausted && rec.ReopenedBy == w.r.run.ID {
				refailedIDs = append(refailedIDs, p.entryID)
				resolved[p.entryID] = true
				continue
			}
		}
		// The dead letter of a replayed message is a new entry (its ID
		// derives from the run): that it exists is the re-failure.
		if _, gerr := w.r.archive.Get(ctx, p.deadLetter); gerr == nil {
			refailedIDs = append(refailedIDs, p.entryID)
			resolved[p.entryID] = true
		}
	}
	if scan {
		f := archive.Filter{ReplayID: w.r.run.ID}
		for {
			page, lerr := w.r.archive.List(ctx, f, archive.Page{After: cursor, Limit: pageSize})
			if lerr != nil {
				err = fmt.Errorf("replay: list re-failures: %w", lerr)
				break
			}
			for _, e := range page {
				cursor = e.Seq
				id := e.ID
				if e.Message != nil && e.Message.Metadata.Get(envelope.KeyReplayOf) != "" {
					id = e.Message.Metadata.Get(envelope.KeyReplayOf)
				}
				refailedIDs = append(refailedIDs, id)
				resolved[id] = true
			}
			if len(page) < pageSize {
				break
			}
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	w.cursor = max(w.cursor, cursor)
	kept := w.pending[:0]
	for _, p := range w.pending {
		if !resolved[p.entryID] {
			kept = append(kept, p)
		}
	}
	w.pending = kept
	refails := 0
	for _, id := range refailedIDs {
		if !w.counted[id] {
			w.counted[id] = true
			refails++
		}
	}
	if successes > 0 {
		w.consecutive = 0
	}
	w.consecutive += refails
	w.refailed += refails
	if refails > 0 || successes > 0 {
		w.r.log.InfoContext(ctx, "replay: outcomes of replayed messages", "refailed", refails, "done", successes,
			"consecutive_refailures", w.consecutive)
	}
	return !final && w.abortAfter > 0 && w.consecutive >= w.abortAfter, err
}
