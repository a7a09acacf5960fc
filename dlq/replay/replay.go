package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/middleware"
)

// ErrAborted is returned when the run stopped itself after AbortAfter consecutive
// re-failures. It is saved with State archive.RunAborted; Resume
// continues it.
var ErrAborted = errors.New("replay: aborted after consecutive re-failures")

// defaultAbortAfter is the AbortAfter of a run without WithAbortAfter.
const defaultAbortAfter = 10

// envelopePrefix starts every metadata key surely adds; a replayed message
// gets none of the envelope's.
const envelopePrefix = "surely_"

// pageSize is how many entries one List call reads.
const pageSize = 100

// config is the configuration of one Run or Resume call, read from its
// options. The zero value replays every archived entry, one at a time, as
// fast as the publisher takes them, refusing entries whose dedup
// retention is unknown.
type config struct {
	ID               string         // WithID
	Filter           archive.Filter // Run's filter; the saved run's on Resume
	Target           string         // WithTarget
	NewKey           bool           // WithNewKey
	KeyMetadata      string         // WithNewKey's metadata key
	Max              int            // WithMax
	DryRun           bool           // WithDryRun
	Force            bool           // WithForce
	DefaultRetention time.Duration  // WithDefaultRetention
	Rate             float64        // WithRate
	Concurrency      int            // WithConcurrency
	AbortAfter       int            // WithAbortAfter
	Store            idempotency.Store
	Clock            clock // dlq.WithClock
	Logger           *slog.Logger
	Progress         func(Progress)
	TracerProvider   trace.TracerProvider
}

// Action is what the run did with one entry.
type Action string

// The actions reported in Progress.
const (
	ActionReplayed    Action = "replayed"
	ActionRefused     Action = "refused"
	ActionWouldReplay Action = "would_replay"
	ActionWouldRefuse Action = "would_refuse"
)

// Progress reports one decision and the counters of the call so far.
type Progress struct {
	RunID   string
	EntryID string
	Seq     int64
	// Topic is where the message goes (or would go).
	Topic  string
	Action Action
	// Reason tells why an entry was refused.
	Reason string
	// Total is how many entries the filter selected when the call began
	// (bounded by Max), for a progress bar; Done how many were decided.
	Total, Done int
	// Counters of this call.
	Replayed, Refused, Refailed int
}

// Summary is what one Run or Resume call did.
type Summary struct {
	RunID string
	// State is the saved state of the run ("" for a dry run).
	State archive.RunState
	// Counters of this call. WouldReplay and Refused (with would_refuse)
	// count a dry run's decisions. Resolved counts the entries marked
	// resolved; Pending (Reconcile) those whose outcome is still unknown.
	Replayed, Refused, WouldReplay, Refailed, Resolved, Pending int
	// After is the run's cursor: every entry up to this Seq was handled.
	After int64
	// First and Last are the clock times of the first and last publish of
	// this call; Rate the achieved publishes per second between them (0
	// with fewer than two publishes).
	First, Last time.Time
	Rate        float64
}

// Run starts a new replay run: it republishes the archived entries that
// filter selects when it starts (its NotReplayedBy is set to the run's
// ID; entries archived later, the run's own re-failures among them, are
// left out: see the package doc), in Seq order, to pub. It returns when every selected entry is handled (State "done"),
// when WithMax is reached, when ctx ends or a publish, mark or save fails
// (State "interrupted", the error is returned), when the run aborts
// itself (ErrAborted), or when an operator canceled it in the archive
// (State "canceled", an error wrapping context.Canceled). Each entry it
// republishes is marked replayed (archive.StateReplayed); with WithStore,
// those whose operation it sees completed are marked resolved. The
// Summary is filled in every case. Run refuses
// (dlq.ErrInvalidOption) the ID of a run the archive already has: Resume
// continues that one.
//
// It takes the options of this package and dlq.WithLogger (every
// decision and the run's progress; default: discard) and dlq.WithClock.
//
// Run neither closes ar nor pub: the caller owns them.
func Run(ctx context.Context, ar archive.Archive, pub message.Publisher, filter archive.Filter, opts ...dlq.Option) (Summary, error) {
	o, err := newConfig("replay.Run", opts, runOptions)
	if err != nil {
		return Summary{}, err
	}
	o.Filter = filter
	o, err = o.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	if ar == nil || pub == nil {
		return Summary{}, fmt.Errorf("%w: replay needs an archive and a publisher", dlq.ErrInvalidOption)
	}
	id := o.ID
	if id == "" {
		id = uuid.NewString()
	}
	switch _, err := ar.LoadReplay(ctx, id); {
	case err == nil:
		return Summary{RunID: id}, fmt.Errorf("%w: replay: run %q already exists: Resume continues it", dlq.ErrInvalidOption, id)
	case !errors.Is(err, archive.ErrNotFound):
		return Summary{RunID: id}, fmt.Errorf("replay: load run %q: %w", id, err)
	}
	now := o.Clock.Now()
	run := archive.ReplayRun{
		ID: id, Filter: o.Filter, Target: o.Target, NewKey: o.NewKey, Force: o.Force,
		State: archive.RunRunning, Started: now, Updated: now,
	}
	if o.NewKey {
		run.KeyMetadata = o.KeyMetadata
	}
	run.Filter.NotReplayedBy = ""
	return execute(ctx, ar, pub, run, archive.ReplayRun{}, o)
}

// Resume continues the run id saved in ar: after its cursor, up to the
// bound saved when the run started, skipping the entries it already
// republished. The run's saved filter, target, new-key
// choice (with its metadata key) and force apply: Resume refuses WithID,
// WithTarget, WithNewKey and WithForce. The other options (rate, concurrency, max, dry run, ...)
// apply to this call.
func Resume(ctx context.Context, ar archive.Archive, pub message.Publisher, id string, opts ...dlq.Option) (Summary, error) {
	o, err := newConfig("replay.Resume", opts, resumeOptions)
	if err != nil {
		return Summary{}, err
	}
	o.ID = id
	o, err = o.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	if ar == nil || pub == nil {
		return Summary{}, fmt.Errorf("%w: replay needs an archive and a publisher", dlq.ErrInvalidOption)
	}
	if id == "" {
		return Summary{}, fmt.Errorf("%w: Resume needs a run ID", dlq.ErrInvalidOption)
	}
	run, err := ar.LoadReplay(ctx, id)
	if err != nil {
		return Summary{RunID: id}, fmt.Errorf("replay: load run %q: %w", id, err)
	}
	o.Filter, o.Target, o.NewKey, o.Force = run.Filter, run.Target, run.NewKey, run.Force
	if run.KeyMetadata != "" {
		o.KeyMetadata = run.KeyMetadata
	}
	loaded := run
	run.State = archive.RunRunning
	return execute(ctx, ar, pub, run, loaded, o)
}

func (o config) withDefaults() (config, error) {
	bad := func(format string, args ...any) (config, error) {
		return o, fmt.Errorf("%w: replay: "+format, append([]any{dlq.ErrInvalidOption}, args...)...)
	}
	switch {
	case o.Rate < 0:
		return bad("rate must not be negative, got %v", o.Rate)
	case o.Concurrency < 0:
		return bad("concurrency must not be negative, got %d", o.Concurrency)
	case o.Max < 0:
		return bad("max must not be negative, got %d", o.Max)
	case o.DefaultRetention < 0:
		return bad("default retention must not be negative, got %v", o.DefaultRetention)
	}
	if o.ID != "" {
		if err := idem.ValidateKey(o.ID); err != nil {
			return bad("run ID: %w", err)
		}
	}
	if o.KeyMetadata == "" {
		o.KeyMetadata = idempotency.DefaultMetadataKey
	}
	if strings.HasPrefix(o.KeyMetadata, envelopePrefix) {
		return bad("key metadata %q must not start with %q", o.KeyMetadata, envelopePrefix)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.AbortAfter == 0 {
		o.AbortAfter = defaultAbortAfter
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// runner is the state of one Run or Resume call.
type runner struct {
	archive archive.Archive
	pub     message.Publisher
	o       config
	log     *slog.Logger
	watch   *watcher

	mu sync.Mutex
	// run is the saved state; its After only moves past entries whose
	// publish finished (or that were refused): inflight holds the Seqs
	// dispatched in order, done those that finished.
	run      archive.ReplayRun
	inflight []int64
	done     map[int64]bool
	res      Summary
	total    int
	decided  int
	err      error // the first publish, mark or save error
	canceled bool  // an operator canceled the run (seen by save)
	// base is the run as this call last read (Resume's load) or wrote it:
	// a saved run that differs from it was saved by someone else.
	base archive.ReplayRun
}

// execute runs run; base is the run as the caller loaded it (zero for a
// new run).
func execute(ctx context.Context, ar archive.Archive, pub message.Publisher, run, base archive.ReplayRun, o config) (Summary, error) {
	r := &runner{
		archive: ar, pub: pub, o: o, run: run, base: base, done: map[int64]bool{},
		log: o.Logger.With(slog.String("replay_id", run.ID)),
	}
	r.res = Summary{RunID: run.ID, After: run.After}
	filter := run.Filter
	filter.NotReplayedBy = run.ID
	if o.NewKey {
		r.log.WarnContext(ctx, "replay: minting a new operation key for every message (NewKey): the handlers see new operations, their dedup records are bypassed",
			slog.String("key_metadata", o.KeyMetadata))
	}
	if r.run.Until == 0 {
		until, err := highWater(ctx, ar, filter)
		if err != nil {
			return r.res, err
		}
		r.run.Until = until
	}
	stats, err := ar.Stats(ctx, filter)
	if err != nil {
		return r.res, fmt.Errorf("replay: stats: %w", err)
	}
	r.total = stats.Total
	if o.Max > 0 && o.Max < r.total {
		r.total = o.Max
	}
	if !o.DryRun {
		r.watch = newWatcher(r)
		if err := r.watch.start(ctx); err != nil {
			return r.res, err
		}
		if err := r.save(ctx); err != nil {
			return r.res, err
		}
	}
	r.log.InfoContext(ctx, "replay: starting", slog.Int("selected", stats.Total), slog.Int64("after", run.After), slog.Int64("until", r.run.Until),
		slog.Bool("dry_run", o.DryRun), slog.Float64("rate", o.Rate), slog.Int("concurrency", o.Concurrency))

	more, stopErr := r.loop(ctx, filter)
	if o.DryRun {
		r.log.InfoContext(ctx, "replay: dry run finished", slog.Int("would_replay", r.res.WouldReplay), slog.Int("refused", r.res.Refused))
		return r.res, stopErr
	}
	return r.finish(ctx, more, stopErr)
}

// finish counts the last re-failures, saves the run's final state and
// returns the call's summary and why it stopped (nil: every entry was
// handled).
func (r *runner) finish(ctx context.Context, more bool, stopErr error) (Summary, error) {
	// Count the re-failures that arrived since the last check, without
	// aborting: everything is published.
	if !errors.Is(stopErr, ErrAborted) {
		if _, err := r.watch.check(context.WithoutCancel(ctx), true); err != nil {
			r.log.WarnContext(ctx, "replay: re-failure check failed", slog.Any("error", err))
		}
	}
	r.mu.Lock()
	r.res.Refailed = r.watch.refailedNow()
	r.run.Refailed += r.res.Refailed
	if stopErr == nil {
		stopErr = r.err
	}
	r.run.State = finalState(stopErr, more)
	r.mu.Unlock()
	if err := r.save(context.WithoutCancel(ctx)); err != nil && stopErr == nil {
		stopErr = err
	}
	r.mu.Lock()
	r.res.State = r.run.State
	r.mu.Unlock()
	r.log.InfoContext(ctx, "replay: "+string(r.res.State), slog.Int("replayed", r.res.Replayed), slog.Int("refused", r.res.Refused),
		slog.Int("refailed", r.res.Refailed), slog.Int64("after", r.res.After), slog.Float64("achieved_rate", r.res.Rate))
	return r.res, stopErr
}

// finalState is the state a run is saved in when a call ends: stopped by
// stopErr, or with entries left (more).
func finalState(stopErr error, more bool) archive.RunState {
	switch {
	case errors.Is(stopErr, ErrAborted):
		return archive.RunAborted
	case stopErr != nil:
		return archive.RunInterrupted
	case more:
		return archive.RunPaused
	}
	return archive.RunDone
}

// dispatch is the state of one loop: its contexts (ctx the call's, dctx
// ended at the first publish failure), the bound of publishes in flight,
// the rate limiter and the count of dispatched entries.
type dispatch struct {
	ctx, dctx  context.Context
	cancel     context.CancelFunc
	sem        chan struct{}
	lim        *limiter
	wg         sync.WaitGroup
	dispatched int
}

// highWaterPage is how many entries one List of highWater reads.
const highWaterPage = 1000

// highWater returns the highest Seq that filter selects now (0: none), the
// bound of a run that starts now (archive.ReplayRun.Until). It lists the
// selection without payloads.
func highWater(ctx context.Context, ar archive.Archive, filter archive.Filter) (int64, error) {
	var last int64
	for {
		page, err := ar.List(ctx, filter, archive.Page{After: last, Limit: highWaterPage, OmitPayload: true})
		if err != nil {
			return 0, fmt.Errorf("replay: list the selection's bound: %w", err)
		}
		if len(page) > 0 {
			last = page[len(page)-1].Seq
		}
		if len(page) < highWaterPage {
			return last, nil
		}
	}
}

// loop pages through the selected entries up to the run's bound (Until)
// and dispatches them, skipping the dead letters of this run's own
// re-failures. It returns why it stopped early (nil: every entry was
// handled) and whether entries are left (Max reached).
func (r *runner) loop(ctx context.Context, filter archive.Filter) (more bool, err error) {
	if err := r.canceledErr(); err != nil {
		return false, err
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := &dispatch{ctx: ctx, dctx: dctx, cancel: cancel,
		sem: make(chan struct{}, r.o.Concurrency), lim: newLimiter(r.o.Clock, r.o.Rate)}
	defer d.wg.Wait()
	cursor, until := r.run.After, r.run.Until
	for {
		page, err := r.archive.List(ctx, filter, archive.Page{After: cursor, Limit: pageSize})
		if err != nil {
			return false, fmt.Errorf("replay: list: %w", err)
		}
		for _, e := range page {
			if e.Seq > until {
				// Archived after the run started: another run's business.
				return false, nil
			}
			cursor = e.Seq
			if r.ownRefailure(e) {
				continue
			}
			if r.o.Max > 0 && d.dispatched >= r.o.Max {
				return true, nil
			}
			if err := r.handle(d, e); err != nil {
				return false, err
			}
		}
		if len(page) < pageSize {
			return false, nil
		}
	}
}

// ownRefailure reports whether e is the dead letter of a message this run
// replayed: replaying it in the same run would dead-letter it again under
// its own ID (a copy of itself). Seq order keeps such entries past Until;
// this also covers a run whose bound was set only when it was resumed.
func (r *runner) ownRefailure(e archive.Entry) bool {
	if e.Message == nil || e.Message.Metadata.Get(dlq.KeyReplayID) != r.run.ID {
		return false
	}
	r.log.Debug("replay: skipped the dead letter of this run's own re-failure", slog.String("entry", e.ID))
	return true
}

// handle decides one entry: a dry run reports it, a refused entry is
// counted, the others are published.
func (r *runner) handle(d *dispatch, e archive.Entry) error {
	topic, reason := r.decide(d.ctx, e)
	if r.o.DryRun {
		r.dryRun(d.ctx, e, topic, reason)
		if reason == "" {
			d.dispatched++
		}
		return nil
	}
	if reason != "" {
		r.refuse(d.ctx, e, topic, reason)
		return nil
	}
	select {
	case d.sem <- struct{}{}:
	case <-d.dctx.Done():
		return r.stopCause(d.ctx)
	}
	if err := r.admit(d); err != nil {
		<-d.sem
		return err
	}
	msg := r.build(e)
	r.mu.Lock()
	r.inflight = append(r.inflight, e.Seq)
	r.mu.Unlock()
	d.dispatched++
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() { <-d.sem }()
		if err := r.publish(d.ctx, e, topic, msg); err != nil {
			r.fail(err)
			d.cancel()
		}
	}()
	return nil
}

// admit returns why the next publish must not go (a publish failed, an
// operator canceled the run, the run aborts, the context ended while
// waiting for the rate limiter), or nil once it may.
func (r *runner) admit(d *dispatch) error {
	if err := r.failed(); err != nil {
		return err
	}
	if err := r.canceledErr(); err != nil {
		return err
	}
	if r.watch.due() {
		abort, err := r.watch.check(d.dctx, false)
		if err != nil {
			r.log.WarnContext(d.ctx, "replay: re-failure check failed", slog.Any("error", err))
		}
		if abort {
			return fmt.Errorf("%w: %d in a row (AbortAfter %d)", ErrAborted, r.watch.consecutiveNow(), r.o.AbortAfter)
		}
	}
	if err := d.lim.Wait(d.dctx); err != nil {
		return r.stopCause(d.ctx)
	}
	return nil
}

// canceledErr is the error of a run an operator canceled, or nil. It
// wraps context.Canceled.
func (r *runner) canceledErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.canceled {
		return nil
	}
	return fmt.Errorf("replay: run %s canceled by an operator: %w", r.run.ID, context.Canceled)
}

// stopCause is why dispatching stopped: the first failure, else ctx's error.
func (r *runner) stopCause(ctx context.Context) error {
	if err := r.failed(); err != nil {
		return err
	}
	return ctx.Err()
}

func (r *runner) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *runner) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// decide returns the topic of e and, when e must not be replayed, why.
func (r *runner) decide(ctx context.Context, e archive.Entry) (topic, reason string) {
	topic = r.o.Target
	if topic == "" {
		topic = e.OriginalTopic
	}
	if e.Message == nil {
		return topic, "the entry has no message"
	}
	if topic == "" {
		return topic, "no original topic in the envelope and no Target"
	}
	if !r.o.NewKey && e.Message.Metadata.Get(dlq.KeyOriginalUUID) == "" {
		return topic, "no original UUID in the envelope (" + dlq.KeyOriginalUUID + "): the operation key cannot be kept"
	}
	reason = r.retentionGuard(ctx, e)
	if reason == "" {
		return topic, ""
	}
	if r.o.Force {
		if !r.o.DryRun {
			r.log.Warn("replay: forced past the retention guard", slog.String("entry", e.ID), slog.String("guard", reason))
		}
		return topic, ""
	}
	return topic, reason
}

// retentionGuard returns why e's dedup record may be gone ("" when it is
// known to be there). With a Store it reads the record itself: its
// ExpiresAt decides, and a missing record means it expired. Without one it
// takes the earliest moment the record can expire, from the envelope (see
// the package doc).
func (r *runner) retentionGuard(ctx context.Context, e archive.Entry) string {
	now := r.o.Clock.Now()
	ns, key := e.Message.Metadata.Get(dlq.KeyNamespace), e.OperationKey
	if r.o.Store != nil && ns != "" && key != "" {
		rec, err := r.o.Store.Get(ctx, ns, key)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
			return fmt.Sprintf("the dedup record of %q (namespace %q) is gone from the store: it expired, a replay would run the operation again", key, ns)
		case err != nil:
			return fmt.Sprintf("the dedup record of %q could not be read: %v", key, err)
		case !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt):
			return fmt.Sprintf("the dedup record of %q expired at %s", key, rec.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return ""
	}
	retention, known := retentionOf(e, r.o.DefaultRetention)
	switch {
	case !known:
		return "the dedup retention is unknown (no " + dlq.KeyRetention + " in the envelope, no WithDefaultRetention): the record may be gone"
	case e.Reason == dlq.ReasonConflict:
		// The record is the other payload's: its last write came before
		// this message's first attempt, up to a whole retention earlier,
		// so it may expire at any moment after the dead letter.
		return "conflict: the dedup record is the other payload's, written before this message came, up to a retention earlier; its expiry is unknown without the store (WithStore, --store)"
	}
	written := earliestWrite(e)
	if age := now.Sub(written); age >= retention {
		what := "dead-lettered"
		if written.Before(e.DeadLetteredAt) {
			what = "last failed"
		}
		return fmt.Sprintf("%s %v ago, longer than the dedup retention %v: the record may be gone", what, age.Round(time.Second), retention)
	}
	return ""
}

// earliestWrite is the earliest moment the entry's dedup record may have
// been written last: the last failure of the envelope when it is earlier
// than the dead letter, else the dead letter.
func earliestWrite(e archive.Entry) time.Time {
	t := e.DeadLetteredAt
	if s := e.Message.Metadata.Get(dlq.KeyLastFailureAt); s != "" {
		if lf, err := time.Parse(time.RFC3339Nano, s); err == nil && !lf.IsZero() && lf.Before(t) {
			t = lf
		}
	}
	return t
}

// retentionOf returns the dedup retention of e: its envelope's, else def
// (known when positive).
func retentionOf(e archive.Entry, def time.Duration) (time.Duration, bool) {
	if s := e.Message.Metadata.Get(dlq.KeyRetention); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			return d, true
		}
	}
	return def, def > 0
}

// build returns the message that replays e: the original payload, UUID
// and metadata without the envelope's keys, plus the replay's keys.
func (r *runner) build(e archive.Entry) *message.Message {
	src := e.Message
	md := make(message.Metadata, len(src.Metadata)+3)
	for k, v := range src.Metadata {
		if !strings.HasPrefix(k, envelopePrefix) {
			md[k] = v
		}
	}
	md[dlq.KeyReplayOf] = e.ID
	md[dlq.KeyReplayID] = r.run.ID
	if tp := src.Metadata.Get(dlq.KeyDeadLetterTraceparent); tp != "" {
		md[dlq.KeyReplayLink] = tp
	}
	id := src.Metadata.Get(dlq.KeyOriginalUUID)
	if r.o.NewKey {
		id = newKeyFor(r.run.ID, e.ID)
		md[r.o.KeyMetadata] = id
	}
	msg := message.NewMessage(id, slices.Clone(src.Payload))
	msg.Metadata = md
	return msg
}

// newKeySpace is the UUIDv5 namespace of the keys NewKey mints.
var newKeySpace = uuid.MustParse("a0c4f1d2-6b0e-4f57-9d0c-3c1f5e2b7a91")

// newKeyFor is the UUID (and operation key) that a NewKey run runID gives
// the replay of entry entryID: derived from both, so every publish of one
// entry by one run carries the same key.
func newKeyFor(runID, entryID string) string {
	return uuid.NewSHA1(newKeySpace, []byte(runID+"\x00"+entryID)).String()
}

func (r *runner) publish(ctx context.Context, e archive.Entry, topic string, msg *message.Message) error {
	span := r.startSpan(ctx, e, topic, msg)
	sent := r.o.Clock.Now()
	err := r.pub.Publish(topic, msg)
	endSpan(span, err)
	if err != nil {
		return fmt.Errorf("replay: publish entry %s to %q: %w", e.ID, topic, err)
	}
	at := r.o.Clock.Now()
	// The publish happened: record it even when ctx has ended.
	ctx = context.WithoutCancel(ctx)
	markErr := r.mark(ctx, e.ID)
	r.watch.track(e, msg, sent)
	r.mu.Lock()
	r.res.Replayed++
	r.run.Replayed++
	if r.res.First.IsZero() {
		r.res.First = at
	}
	r.res.Last = at
	if n := r.res.Replayed; n > 1 {
		if d := r.res.Last.Sub(r.res.First); d > 0 {
			r.res.Rate = float64(n-1) / d.Seconds()
		}
	}
	r.finishLocked(e.Seq)
	r.report(Progress{EntryID: e.ID, Seq: e.Seq, Topic: topic, Action: ActionReplayed})
	r.mu.Unlock()
	r.log.DebugContext(ctx, "replay: published", slog.String("entry", e.ID), slog.String("topic", topic), slog.String("uuid", msg.UUID))
	if markErr != nil {
		return fmt.Errorf("replay: mark entry %s replayed: %w", e.ID, markErr)
	}
	return r.save(ctx)
}

func (r *runner) refuse(ctx context.Context, e archive.Entry, topic, reason string) {
	r.log.WarnContext(ctx, "replay: refused", slog.String("entry", e.ID), slog.String("reason", reason))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight = append(r.inflight, e.Seq)
	r.res.Refused++
	r.run.Refused++
	r.finishLocked(e.Seq)
	r.report(Progress{EntryID: e.ID, Seq: e.Seq, Topic: topic, Action: ActionRefused, Reason: reason})
}

func (r *runner) dryRun(ctx context.Context, e archive.Entry, topic, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Progress{EntryID: e.ID, Seq: e.Seq, Topic: topic, Action: ActionWouldReplay, Reason: reason}
	if reason != "" {
		p.Action = ActionWouldRefuse
		r.res.Refused++
	} else {
		r.res.WouldReplay++
	}
	r.log.InfoContext(ctx, "replay: dry run", slog.String("entry", e.ID), slog.String("topic", topic),
		slog.String("decision", string(p.Action)), slog.String("reason", reason))
	r.report(p)
}

// finishLocked marks seq handled and moves the cursor past every handled
// entry with no unfinished one before it.
func (r *runner) finishLocked(seq int64) {
	r.done[seq] = true
	for len(r.inflight) > 0 && r.done[r.inflight[0]] {
		delete(r.done, r.inflight[0])
		r.run.After = r.inflight[0]
		r.inflight = r.inflight[1:]
	}
	r.res.After = r.run.After
}

// report calls the Progress callback; r.mu is held.
func (r *runner) report(p Progress) {
	r.decided++
	if r.o.Progress == nil {
		return
	}
	p.RunID = r.run.ID
	p.Total, p.Done = r.total, r.decided
	p.Replayed, p.Refused = r.res.Replayed, r.res.Refused
	if r.watch != nil {
		p.Refailed = r.watch.refailedNow()
	}
	r.o.Progress(p)
}

// mark records that the run republished entry id: the entry becomes
// replayed.
func (r *runner) mark(ctx context.Context, id string) error {
	n, err := r.archive.Mark(ctx, archive.Mark{To: archive.StateReplayed, Run: r.run.ID}, id)
	if err == nil && n == 0 {
		err = fmt.Errorf("entry %s: %w", id, archive.ErrNotFound)
	}
	return err
}

// save stores the run's state; saves are serialized so a later cursor is
// never overwritten by an earlier one. Each save reads the saved run
// first, the first one of a call included, and does not overwrite what it
// did not read (see merge): an operator who canceled it
// (archive.RunCanceled) since this call last read or wrote it stops it,
// and the run stays canceled, also when the call ends at the same time
// for another reason (its context ended: the console cancels both); only
// a run that is done is saved done, without reading. A run that cannot be
// read is not saved (the error is returned).
func (r *runner) save(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run.State != archive.RunDone {
		cur, err := r.archive.LoadReplay(ctx, r.run.ID)
		switch {
		case err == nil:
			r.merge(cur)
		case !errors.Is(err, archive.ErrNotFound):
			return fmt.Errorf("replay: save run: read it first: %w", err)
		}
	}
	if r.canceled {
		r.run.State = archive.RunCanceled
	}
	r.run.Updated = r.o.Clock.Now()
	if err := r.archive.SaveReplay(ctx, r.run); err != nil {
		return fmt.Errorf("replay: save run: %w", err)
	}
	r.base = r.run
	return nil
}

// merge takes in what others saved of the run since this call last read
// or wrote it (r.base), as cur shows: a cancel (a canceled run that Resume
// loaded canceled is not a new cancel), and the entries Reconcile resolved
// meanwhile. r.mu is held.
func (r *runner) merge(cur archive.ReplayRun) {
	loadedCanceled := r.base.State == archive.RunCanceled && cur.Updated.Equal(r.base.Updated)
	if cur.State == archive.RunCanceled && !loadedCanceled {
		r.canceled = true
	}
	if cur.Resolved > r.base.Resolved {
		r.run.Resolved += cur.Resolved - r.base.Resolved
	}
}

// startSpan starts the span of one publish when a TracerProvider is set,
// and puts it in msg's context for the publisher (a no-op span otherwise).
func (r *runner) startSpan(ctx context.Context, e archive.Entry, topic string, msg *message.Message) trace.Span {
	if r.o.TracerProvider == nil {
		return noop.Span{}
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", topic),
			attribute.String("messaging.message.id", msg.UUID),
			middleware.AttrReplayID.String(r.run.ID),
			middleware.AttrReplayOf.String(e.ID),
		),
	}
	if tp := e.Message.Metadata.Get(dlq.KeyDeadLetterTraceparent); tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp}
		if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier)); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
				Attributes: []attribute.KeyValue{middleware.AttrLink.String(middleware.LinkDeadLetter)}}))
		}
	}
	ctx, span := r.o.TracerProvider.Tracer(tracerName).Start(ctx, "replay "+topic, opts...) //nolint:spancheck // the caller ends it with endSpan
	msg.SetContext(ctx)
	return span //nolint:spancheck // the caller ends it with endSpan
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// tracerName is the instrumentation scope of the replay spans.
const tracerName = "github.com/surely-dev/surely/dlq/replay"
