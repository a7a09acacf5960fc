// Package memarchive is an in-memory archive.Archive for tests and examples
// only.
//
// It keeps dead letters in the process's memory: a crash or a restart
// forgets every one of them, which is exactly what an archive exists to
// prevent. An acknowledged dead letter (Publish returned, Ingest acked the
// broker's copy) survives nothing but the process. Use dlq/redisarchive or
// dlq/sqlarchive in production.
//
// An Archive is safe for concurrent use. It is a Watermill publisher that
// ignores the topic: pass it to handler.WithDeadLetter with any topic name.
package memarchive

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/archivekit"
	"github.com/surely-dev/surely/internal/options"
)

// memArchive is the in-memory archive.Archive that New returns.
type memArchive struct {
	mu      sync.Mutex
	now     func() time.Time
	seq     int64
	entries map[string]*archive.Entry
	order   []*archive.Entry // by Seq; deleted entries are removed
	runs    map[string]archive.ReplayRun
}

var _ archive.Archive = (*memArchive)(nil)

// New returns an empty archive. It takes dlq.WithClock (stamps ArchivedAt;
// default time.Now). It has no retention: it keeps every entry until
// Delete, or until the process ends.
func New(opts ...dlq.Option) (archive.Archive, error) {
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(dlq.ErrInvalidOption, "memarchive.New", options.Clock); err != nil {
		return nil, err
	}
	return &memArchive{
		now:     options.Get(s, options.Clock, time.Now),
		entries: map[string]*archive.Entry{},
		runs:    map[string]archive.ReplayRun{},
	}, nil
}

// Publish stores each message as an entry; the topic is ignored. A message
// whose UUID is already archived increments that entry's Copies and keeps
// its first copy. A message without a UUID fails the whole call with
// archive.ErrNoID before anything is stored.
func (a *memArchive) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m == nil || m.UUID == "" {
			return fmt.Errorf("memarchive: publish: %w", archive.ErrNoID)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range msgs {
		if e, ok := a.entries[m.UUID]; ok {
			e.Copies++
			continue
		}
		e := archivekit.Entry(m, a.now())
		a.seq++
		e.Seq = a.seq
		a.entries[e.ID] = &e
		a.order = append(a.order, &e)
		// The dead letter of a replayed message that failed again links
		// the entry it replayed to itself.
		if of, ok := a.entries[m.Metadata.Get(dlq.KeyReplayOf)]; ok && of != &e {
			of.FailedAgainAs = e.ID
		}
	}
	return nil
}

// Close does nothing: the archive stays readable and writable.
func (a *memArchive) Close() error { return nil }

// Get returns one entry, or archive.ErrNotFound.
func (a *memArchive) Get(_ context.Context, id string) (archive.Entry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[id]
	if !ok {
		return archive.Entry{}, fmt.Errorf("memarchive: %q: %w", id, archive.ErrNotFound)
	}
	return clone(e), nil
}

// List returns one page of the entries f selects, in Seq order.
func (a *memArchive) List(_ context.Context, f archive.Filter, p archive.Page) ([]archive.Entry, error) {
	limit := archivekit.PageLimit(p)
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.order), func(i int) bool { return a.order[i].Seq > p.After })
	var out []archive.Entry
	for ; i < len(a.order) && len(out) < limit; i++ {
		if f.Match(*a.order[i]) {
			e := clone(a.order[i])
			if p.OmitPayload {
				e.Message.Payload = nil
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Stats summarises the entries f selects.
func (a *memArchive) Stats(_ context.Context, f archive.Filter) (archive.Stats, error) {
	s := archivekit.NewStats()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.order {
		if f.Match(*e) {
			archivekit.AddStats(&s, *e)
		}
	}
	return s, nil
}

// Delete removes entries by ID and returns how many existed.
func (a *memArchive) Delete(_ context.Context, ids ...string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deleteLocked(ids), nil
}

func (a *memArchive) deleteLocked(ids []string) int {
	n := 0
	for _, id := range ids {
		if _, ok := a.entries[id]; ok {
			delete(a.entries, id)
			n++
		}
	}
	if n > 0 {
		a.order = slices.DeleteFunc(a.order, func(e *archive.Entry) bool {
			_, ok := a.entries[e.ID]
			return !ok
		})
	}
	return n
}

// Mark moves the entries to m.To and returns how many exist.
func (a *memArchive) Mark(_ context.Context, m archive.Mark, ids ...string) (int, error) {
	if err := archivekit.CheckMark(m); err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	n := 0
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		if e, ok := a.entries[id]; ok {
			archivekit.ApplyMark(e, m, now)
			n++
		}
	}
	return n, nil
}

// SaveReplay stores (creates or updates) a replay run.
func (a *memArchive) SaveReplay(_ context.Context, run archive.ReplayRun) error {
	if run.ID == "" {
		return fmt.Errorf("%w: replay run without ID", dlq.ErrInvalidOption)
	}
	run.Filter.IDs = slices.Clone(run.Filter.IDs)
	run.Filter.States = slices.Clone(run.Filter.States)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs[run.ID] = run
	return nil
}

// LoadReplay reads a replay run back, or returns archive.ErrNotFound.
func (a *memArchive) LoadReplay(_ context.Context, id string) (archive.ReplayRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	run, ok := a.runs[id]
	if !ok {
		return archive.ReplayRun{}, fmt.Errorf("memarchive: replay %q: %w", id, archive.ErrNotFound)
	}
	run.Filter.IDs = slices.Clone(run.Filter.IDs)
	run.Filter.States = slices.Clone(run.Filter.States)
	return run, nil
}

// ListReplays returns every replay run, the most recently started first.
func (a *memArchive) ListReplays(_ context.Context) ([]archive.ReplayRun, error) {
	a.mu.Lock()
	out := make([]archive.ReplayRun, 0, len(a.runs))
	for _, run := range a.runs {
		run.Filter.IDs = slices.Clone(run.Filter.IDs)
		run.Filter.States = slices.Clone(run.Filter.States)
		out = append(out, run)
	}
	a.mu.Unlock()
	archivekit.SortRuns(out)
	return out, nil
}

// clone returns a copy of e that shares no memory with the archive.
func clone(e *archive.Entry) archive.Entry {
	c := *e
	c.Message = archivekit.CopyMessage(e.Message)
	c.ReplayedBy = slices.Clone(e.ReplayedBy)
	return c
}
