package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
)

// noteDone is the Note of an entry marked resolved because its operation's
// dedup record is DONE.
const noteDone = "the replayed operation completed (dedup record done)"

// clockSkew is how far the store's clock may be behind the clock that
// dated a replay (the run's, or the archive's for Reconcile) for the
// completing attempt to count as begun after the replay (see
// replayedDone and the package doc).
const clockSkew = time.Minute

// replayedDone reports whether rec is the DONE record of the operation p
// replayed: its fingerprint is the entry's, and its completing attempt
// (the last of its history) began no earlier than clockSkew before p was
// published. The DONE of a conflict's key is the other payload's, and a
// DONE begun before the replay is not its doing: neither resolves the
// entry. A record without history proves nothing.
func replayedDone(rec idempotency.Record, p tracked) bool {
	if rec.State != idempotency.StateDone || rec.Fingerprint != p.fingerprint {
		return false
	}
	n := len(rec.History)
	return n > 0 && !rec.History[n-1].Started.Before(p.sent.Add(-clockSkew))
}

// fingerprintOf is the payload fingerprint in e's envelope ("" when not
// known).
func fingerprintOf(e archive.Entry) string {
	if e.Message == nil {
		return ""
	}
	return e.Message.Metadata.Get(dlq.KeyFingerprint)
}

// readRecords reads the dedup records of ps, by entry ID: one GetRecords
// per namespace when store is an idempotency.RecordsReader, else one Get
// per key; a DONE record the batch read returned without its fingerprint
// or history is read whole with Get (resolving an entry needs both, see
// the package doc). Records that cannot be read (an error, no namespace or
// key) are absent.
func readRecords(ctx context.Context, store idempotency.Store, ps []tracked) map[string]idempotency.Record {
	out := make(map[string]idempotency.Record, len(ps))
	byNS := map[string][]tracked{}
	for _, p := range ps {
		if p.namespace != "" && p.key != "" {
			byNS[p.namespace] = append(byNS[p.namespace], p)
		}
	}
	rr, batch := store.(idempotency.RecordsReader)
	for ns, group := range byNS {
		if batch {
			keys := make([]string, len(group))
			for i, p := range group {
				keys[i] = p.key
			}
			recs, err := rr.GetRecords(ctx, ns, keys)
			if err != nil {
				continue
			}
			for _, p := range group {
				rec, ok := recs[p.key]
				if ok && rec.State == idempotency.StateDone && (rec.Fingerprint == "" || len(rec.History) == 0) {
					rec, err = store.Get(ctx, ns, p.key)
					ok = err == nil
				}
				if ok {
					out[p.entryID] = rec
				}
			}
			continue
		}
		for _, p := range group {
			if rec, err := store.Get(ctx, ns, p.key); err == nil {
				out[p.entryID] = rec
			}
		}
	}
	return out
}

// Reconcile settles what run id replayed, after the fact: each of its
// entries still replayed (by it, without a failed-again link) whose
// replayed operation completed (its dedup record in store is DONE with
// the entry's fingerprint, by an attempt begun after the replay: see
// "What resolved means" in the package doc) is marked resolved, and the
// run's Resolved count saved. The Summary counts the entries resolved by
// this call (Resolved), those that failed again (Refailed: a new dead
// letter names them) and those whose outcome is still unknown (Pending).
// The records are read in one round trip per namespace when store is an
// idempotency.RecordsReader. It returns an error wrapping
// archive.ErrNotFound for an unknown run.
func Reconcile(ctx context.Context, ar archive.Archive, store idempotency.Store, id string) (Summary, error) {
	if ar == nil || store == nil {
		return Summary{}, fmt.Errorf("%w: reconcile needs an archive and a store", dlq.ErrInvalidOption)
	}
	run, err := ar.LoadReplay(ctx, id)
	if err != nil {
		return Summary{RunID: id}, fmt.Errorf("replay: load run %q: %w", id, err)
	}
	sum := Summary{RunID: id, State: run.State, After: run.After}
	ask, refailed, err := awaiting(ctx, ar, run)
	sum.Refailed = refailed
	if err != nil {
		return sum, err
	}
	recs := readRecords(ctx, store, ask)
	var done []string
	for _, p := range ask {
		if rec, ok := recs[p.entryID]; ok && replayedDone(rec, p) {
			done = append(done, p.entryID)
		}
	}
	sum.Pending = len(ask) - len(done)
	if len(done) == 0 {
		return sum, nil
	}
	n, err := ar.Mark(ctx, archive.Mark{To: archive.StateResolved, Run: id, Note: noteDone}, done...)
	sum.Resolved = n
	if err != nil {
		return sum, fmt.Errorf("replay: mark resolved: %w", err)
	}
	// The count is added to the run as saved now, read again: a cancel, or
	// the progress of a call running it, saved since the load above stays.
	// (A call running it reads the run before each of its saves and keeps
	// this count.)
	cur, err := ar.LoadReplay(ctx, id)
	if err != nil {
		return sum, fmt.Errorf("replay: save run: read it first: %w", err)
	}
	cur.Resolved += n
	if err := ar.SaveReplay(ctx, cur); err != nil {
		return sum, fmt.Errorf("replay: save run: %w", err)
	}
	return sum, nil
}

// awaiting returns the entries run replayed whose outcome is not known
// (still replayed by it, not failed again), as the records to read, and
// how many failed again.
func awaiting(ctx context.Context, ar archive.Archive, run archive.ReplayRun) (ask []tracked, refailed int, err error) {
	f := archive.Filter{ReplayedBy: run.ID, States: []archive.State{archive.StateReplayed}}
	var after int64
	for {
		page, err := ar.List(ctx, f, archive.Page{After: after, Limit: pageSize, OmitPayload: true})
		if err != nil {
			return nil, refailed, fmt.Errorf("replay: list the run's entries: %w", err)
		}
		for _, e := range page {
			after = e.Seq
			switch {
			case len(e.ReplayedBy) > 0 && e.ReplayedBy[len(e.ReplayedBy)-1] != run.ID:
				// Replayed again since, by another run: its business.
			case failedAgainIn(ctx, ar, e, run.ID):
				refailed++
			default:
				key := e.OperationKey
				if run.NewKey {
					key = newKeyFor(run.ID, e.ID)
				}
				// Marked replayed by the archive's clock just after the
				// publish: the reference of replayedDone.
				ask = append(ask, tracked{entryID: e.ID, namespace: e.Namespace, key: key,
					fingerprint: fingerprintOf(e), sent: e.StateAt})
			}
		}
		if len(page) < pageSize {
			return ask, refailed, nil
		}
	}
}

// failedAgainIn reports whether e's replay by run failed again: its
// failed-again link names a dead letter of that run.
func failedAgainIn(ctx context.Context, ar archive.Archive, e archive.Entry, run string) bool {
	if e.FailedAgainAs == "" {
		return false
	}
	d, err := ar.Get(ctx, e.FailedAgainAs)
	return err == nil && d.Message != nil && d.Message.Metadata.Get(dlq.KeyReplayID) == run
}
