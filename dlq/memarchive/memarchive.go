// Package memarchive is an in-memory dlq.Archive for tests and examples
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
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
)

// Archive is an in-memory dlq.Archive. The zero value is not usable; call New.
type Archive struct {
	mu        sync.Mutex
	now       func() time.Time
	log       *slog.Logger
	retention time.Duration
	seq       int64
	entries   map[string]*dlq.Entry
	order     []*dlq.Entry // by Seq; deleted entries are removed
	runs      map[string]dlq.ReplayRun
}

var _ dlq.Archive = (*Archive)(nil)

// Option configures an Archive.
type Option func(*Archive) error

// WithClock replaces the clock that stamps ArchivedAt and that Prune
// measures age with (for deterministic tests).
func WithClock(now func() time.Time) Option {
	return func(a *Archive) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", dlq.ErrInvalidOption)
		}
		a.now = now
		return nil
	}
}

// WithLogger sets the logger Prune reports to (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(a *Archive) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", dlq.ErrInvalidOption)
		}
		a.log = l
		return nil
	}
}

// WithRetention makes Prune delete entries dead-lettered more than d ago.
// Without it the archive keeps everything and Prune deletes nothing.
func WithRetention(d time.Duration) Option {
	return func(a *Archive) error {
		if d <= 0 {
			return fmt.Errorf("%w: retention must be positive, got %v", dlq.ErrInvalidOption, d)
		}
		a.retention = d
		return nil
	}
}

// New returns an empty archive.
func New(opts ...Option) (*Archive, error) {
	a := &Archive{
		now:     time.Now,
		log:     slog.New(slog.DiscardHandler),
		entries: map[string]*dlq.Entry{},
		runs:    map[string]dlq.ReplayRun{},
	}
	for _, o := range opts {
		if err := o(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Publish stores each message as an entry; the topic is ignored. A message
// whose UUID is already archived increments that entry's Copies and keeps
// its first copy. A message without a UUID fails the whole call with
// dlq.ErrNoID before anything is stored.
func (a *Archive) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m == nil || m.UUID == "" {
			return fmt.Errorf("memarchive: publish: %w", dlq.ErrNoID)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range msgs {
		if e, ok := a.entries[m.UUID]; ok {
			e.Copies++
			continue
		}
		e := dlq.EntryFromMessage(m, a.now())
		a.seq++
		e.Seq = a.seq
		a.entries[e.ID] = &e
		a.order = append(a.order, &e)
	}
	return nil
}

// Close does nothing: the archive stays readable and writable.
func (a *Archive) Close() error { return nil }

// Get returns one entry, or dlq.ErrEntryNotFound.
func (a *Archive) Get(_ context.Context, id string) (dlq.Entry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[id]
	if !ok {
		return dlq.Entry{}, fmt.Errorf("memarchive: %q: %w", id, dlq.ErrEntryNotFound)
	}
	return clone(e), nil
}

// List returns one page of the entries f selects, in Seq order.
func (a *Archive) List(_ context.Context, f dlq.Filter, p dlq.Page) ([]dlq.Entry, error) {
	limit := dlq.PageLimit(p)
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.order), func(i int) bool { return a.order[i].Seq > p.After })
	var out []dlq.Entry
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
func (a *Archive) Stats(_ context.Context, f dlq.Filter) (dlq.Stats, error) {
	s := dlq.NewStats()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.order {
		if f.Match(*e) {
			s.Add(*e)
		}
	}
	return s, nil
}

// Delete removes entries by ID and returns how many existed.
func (a *Archive) Delete(_ context.Context, ids ...string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deleteLocked(ids), nil
}

func (a *Archive) deleteLocked(ids []string) int {
	n := 0
	for _, id := range ids {
		if _, ok := a.entries[id]; ok {
			delete(a.entries, id)
			n++
		}
	}
	if n > 0 {
		a.order = slices.DeleteFunc(a.order, func(e *dlq.Entry) bool {
			_, ok := a.entries[e.ID]
			return !ok
		})
	}
	return n
}

// MarkReplayed records that replay run replayID republished entry id
// (once per run), or returns dlq.ErrEntryNotFound.
func (a *Archive) MarkReplayed(_ context.Context, id, replayID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[id]
	if !ok {
		return fmt.Errorf("memarchive: %q: %w", id, dlq.ErrEntryNotFound)
	}
	if !slices.Contains(e.ReplayedBy, replayID) {
		e.ReplayedBy = append(e.ReplayedBy, replayID)
	}
	return nil
}

// SaveReplay stores (creates or updates) a replay run.
func (a *Archive) SaveReplay(_ context.Context, run dlq.ReplayRun) error {
	if run.ID == "" {
		return fmt.Errorf("%w: replay run without ID", dlq.ErrInvalidOption)
	}
	run.Filter.IDs = slices.Clone(run.Filter.IDs)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs[run.ID] = run
	return nil
}

// LoadReplay reads a replay run back, or returns dlq.ErrReplayNotFound.
func (a *Archive) LoadReplay(_ context.Context, id string) (dlq.ReplayRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	run, ok := a.runs[id]
	if !ok {
		return dlq.ReplayRun{}, fmt.Errorf("memarchive: replay %q: %w", id, dlq.ErrReplayNotFound)
	}
	run.Filter.IDs = slices.Clone(run.Filter.IDs)
	return run, nil
}

// Prune deletes the entries dead-lettered longer ago than the retention
// (WithRetention), logs how many, and returns the count. Without a
// retention it deletes nothing.
func (a *Archive) Prune(ctx context.Context) (int, error) {
	if a.retention == 0 {
		return 0, nil
	}
	a.mu.Lock()
	cutoff := a.now().Add(-a.retention)
	var ids []string
	for _, e := range a.order {
		if e.DeadLetteredAt.Before(cutoff) {
			ids = append(ids, e.ID)
		}
	}
	n := a.deleteLocked(ids)
	a.mu.Unlock()
	if n > 0 {
		a.log.InfoContext(ctx, "dead-letter archive pruned", "deleted", n, "retention", a.retention.String(), "cutoff", cutoff)
	}
	return n, nil
}

// clone returns a copy of e that shares no memory with the archive.
func clone(e *dlq.Entry) dlq.Entry {
	c := *e
	c.Message = dlq.CopyMessage(e.Message)
	c.ReplayedBy = slices.Clone(e.ReplayedBy)
	return c
}
