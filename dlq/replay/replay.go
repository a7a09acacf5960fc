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
	"github.com/surely-dev/surely/idempotency"
)

// Errors of a run.
var (
	// ErrAborted: the run stopped itself after AbortAfter consecutive
	// re-failures. It is saved with State "aborted"; Resume continues it.
	ErrAborted = errors.New("replay: aborted after consecutive re-failures")
	// ErrRunExists: Run was given the ID of a run the archive already has.
	// Use Resume to continue it.
	ErrRunExists = errors.New("replay: run already exists")
)

// DefaultAbortAfter is Options.AbortAfter when it is 0.
const DefaultAbortAfter = 10

// The states of a run (dlq.ReplayRun.State).
const (
	StateRunning     = "running"
	StateInterrupted = "interrupted"
	StateAborted     = "aborted"
	StateDone        = "done"
)

// envelopePrefix starts every metadata key surely adds; a replayed message
// gets none of the envelope's.
const envelopePrefix = "surely_"

// pageSize is how many entries one List call reads.
const pageSize = 100

// Options configure a run. The zero value replays every archived entry,
// one at a time, as fast as the publisher takes them, refusing entries
// whose dedup retention is unknown.
type Options struct {
	// ID names the run (at most idempotency.MaxKeyLen bytes, no control
	// characters: the dedup step uses it as ClaimRequest.Reopen). Empty:
	// a new random UUID.
	ID string
	// Filter selects the entries, replayed in Seq order. Its NotReplayedBy
	// is set to the run's ID.
	Filter dlq.Filter
	// Target is the topic every message is republished to; empty: each
	// entry's original topic.
	Target string
	// NewKey gives each replayed message a new operation key: a new UUID
	// (derived from the run and entry IDs, so a repeated publish of one
	// entry by one run keeps it) written as the message UUID and into the
	// metadata key KeyMetadata. The handler then sees a new operation, not
	// the dead-lettered one: its dedup record (DONE or not) is ignored. It
	// works only when the handler's key comes from that metadata key or the
	// message UUID (the default extractor's sources), not from a payload
	// field or CloudEvents attributes. It is logged.
	NewKey bool
	// KeyMetadata is the metadata key NewKey sets (default
	// idempotency.DefaultMetadataKey, "idempotency_key").
	KeyMetadata string
	// Max bounds how many messages the run publishes in this call (0: no
	// bound). Refused entries do not count. A run stopped by Max with
	// entries left is saved "interrupted": Resume publishes the next ones.
	Max int
	// DryRun decides every entry (would replay, or refused and why) and
	// reports it through Progress and the log, without publishing, marking
	// or saving anything.
	DryRun bool
	// Force publishes entries the retention guard refuses (logged per entry).
	Force bool
	// DefaultRetention is the dedup retention of entries whose envelope has
	// no (valid) dlq.KeyRetention. 0: unknown, and such entries are refused
	// unless Force.
	DefaultRetention time.Duration
	// Rate bounds publishes per second (0: no bound). The first publish
	// goes at once, each next one 1/Rate after the previous one's slot: no
	// burst, and no catching up after a slow publish.
	Rate float64
	// Concurrency is how many publishes may be in flight (default 1).
	Concurrency int
	// AbortAfter stops the run after this many consecutive re-failures
	// (see the package doc); 0 means DefaultAbortAfter, negative never.
	AbortAfter int
	// Store, when given, is the handlers' dedup store: the retention guard
	// reads each entry's record (Get) and refuses one that expired or is
	// gone (see the package doc), and the run reads the record of each
	// replayed message to confirm it done, which resets the count of
	// consecutive re-failures.
	Store idempotency.Store
	// Clock is the time source (default SystemClock()).
	Clock Clock
	// Logger receives every decision and the run's progress (default: discard).
	Logger *slog.Logger
	// Progress, when set, is called after every decision, one call at a
	// time (from the run's goroutines): keep it fast.
	Progress func(Progress)
	// TracerProvider, when set, gives each publish a "replay <topic>" span
	// (kind producer) linked to the entry's dead-letter span (the
	// envelope's dlq.KeyDeadLetterTraceparent). The replayed message's
	// first attempt links to the dead-letter span too (dlq.KeyReplayLink).
	TracerProvider trace.TracerProvider
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

// Result is the outcome of one Run or Resume call.
type Result struct {
	RunID string
	// State is the saved state of the run ("" for a dry run).
	State string
	// Counters of this call. WouldReplay and Refused (with would_refuse)
	// count a dry run's decisions.
	Replayed, Refused, WouldReplay, Refailed int
	// After is the run's cursor: every entry up to this Seq was handled.
	After int64
	// First and Last are the clock times of the first and last publish of
	// this call; Rate the achieved publishes per second between them (0
	// with fewer than two publishes).
	First, Last time.Time
	Rate        float64
}

// Run starts a new replay run: it republishes the archived entries that
// opts.Filter selects, in Seq order, to pub. It returns when every selected
// entry is handled (State "done"), when Max is reached, when ctx ends or a
// publish, mark or save fails (State "interrupted", the error is returned),
// or when the run aborts itself (ErrAborted). Result is filled in every case.
//
// Run neither closes archive nor pub: the caller owns them.
func Run(ctx context.Context, archive dlq.Archive, pub message.Publisher, opts Options) (Result, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if archive == nil || pub == nil {
		return Result{}, fmt.Errorf("%w: replay needs an archive and a publisher", dlq.ErrInvalidOption)
	}
	id := o.ID
	if id == "" {
		id = uuid.NewString()
	}
	switch _, err := archive.LoadReplay(ctx, id); {
	case err == nil:
		return Result{RunID: id}, fmt.Errorf("%w: %q", ErrRunExists, id)
	case !errors.Is(err, dlq.ErrReplayNotFound):
		return Result{RunID: id}, fmt.Errorf("replay: load run %q: %w", id, err)
	}
	now := o.Clock.Now()
	run := dlq.ReplayRun{
		ID: id, Filter: o.Filter, Target: o.Target, NewKey: o.NewKey, Force: o.Force,
		State: StateRunning, Started: now, Updated: now,
	}
	run.Filter.NotReplayedBy = ""
	return execute(ctx, archive, pub, run, o)
}

// Resume continues the run id saved in archive: after its cursor, skipping
// the entries it already republished. The run's saved Filter, Target,
// NewKey and Force apply; those of opts are ignored, its other fields
// (rate, concurrency, Max, DryRun, ...) apply to this call.
func Resume(ctx context.Context, archive dlq.Archive, pub message.Publisher, id string, opts Options) (Result, error) {
	opts.ID = id
	o, err := opts.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if archive == nil || pub == nil {
		return Result{}, fmt.Errorf("%w: replay needs an archive and a publisher", dlq.ErrInvalidOption)
	}
	if id == "" {
		return Result{}, fmt.Errorf("%w: Resume needs a run ID", dlq.ErrInvalidOption)
	}
	run, err := archive.LoadReplay(ctx, id)
	if err != nil {
		return Result{RunID: id}, fmt.Errorf("replay: load run %q: %w", id, err)
	}
	o.Filter, o.Target, o.NewKey, o.Force = run.Filter, run.Target, run.NewKey, run.Force
	run.State = StateRunning
	return execute(ctx, archive, pub, run, o)
}

func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
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
		if err := idempotency.ValidateKey(o.ID); err != nil {
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
		o.AbortAfter = DefaultAbortAfter
	}
	if o.Clock == nil {
		o.Clock = SystemClock()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// runner is the state of one Run or Resume call.
type runner struct {
	archive dlq.Archive
	pub     message.Publisher
	o       Options
	log     *slog.Logger
	watch   *watcher

	mu sync.Mutex
	// run is the saved state; its After only moves past entries whose
	// publish finished (or that were refused): inflight holds the Seqs
	// dispatched in order, done those that finished.
	run      dlq.ReplayRun
	inflight []int64
	done     map[int64]bool
	res      Result
	total    int
	decided  int
	err      error // the first publish, mark or save error
}

func execute(ctx context.Context, archive dlq.Archive, pub message.Publisher, run dlq.ReplayRun, o Options) (Result, error) {
	r := &runner{
		archive: archive, pub: pub, o: o, run: run, done: map[int64]bool{},
		log: o.Logger.With(slog.String("replay_id", run.ID)),
	}
	r.res = Result{RunID: run.ID, After: run.After}
	filter := run.Filter
	filter.NotReplayedBy = run.ID
	if o.NewKey {
		r.log.WarnContext(ctx, "replay: minting a new operation key for every message (NewKey): the handlers see new operations, their dedup records are bypassed",
			slog.String("key_metadata", o.KeyMetadata))
	}
	stats, err := archive.Stats(ctx, filter)
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
	r.log.InfoContext(ctx, "replay: starting", slog.Int("selected", stats.Total), slog.Int64("after", run.After),
		slog.Bool("dry_run", o.DryRun), slog.Float64("rate", o.Rate), slog.Int("concurrency", o.Concurrency))

	more, stopErr := r.loop(ctx, filter)
	if o.DryRun {
		r.log.InfoContext(ctx, "replay: dry run finished", slog.Int("would_replay", r.res.WouldReplay), slog.Int("refused", r.res.Refused))
		return r.res, stopErr
	}
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
	switch {
	case errors.Is(stopErr, ErrAborted):
		r.run.State = StateAborted
	case stopErr != nil || more:
		r.run.State = StateInterrupted
	default:
		r.run.State = StateDone
	}
	r.res.State = r.run.State
	r.mu.Unlock()
	if err := r.save(context.WithoutCancel(ctx)); err != nil && stopErr == nil {
		stopErr = err
	}
	r.log.InfoContext(ctx, "replay: "+r.res.State, slog.Int("replayed", r.res.Replayed), slog.Int("refused", r.res.Refused),
		slog.Int("refailed", r.res.Refailed), slog.Int64("after", r.res.After), slog.Float64("achieved_rate", r.res.Rate))
	return r.res, stopErr
}

// loop pages through the selected entries and dispatches them. It returns
// why it stopped early (nil: every entry was handled) and whether entries
// are left (Max reached).
func (r *runner) loop(ctx context.Context, filter dlq.Filter) (more bool, err error) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, r.o.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	lim := newLimiter(r.o.Clock, r.o.Rate)
	cursor := r.run.After
	dispatched := 0
	for {
		page, err := r.archive.List(ctx, filter, dlq.Page{After: cursor, Limit: pageSize})
		if err != nil {
			return false, fmt.Errorf("replay: list: %w", err)
		}
		for _, e := range page {
			cursor = e.Seq
			if r.o.Max > 0 && dispatched >= r.o.Max {
				return true, nil
			}
			topic, reason := r.decide(ctx, e)
			if r.o.DryRun {
				r.dryRun(ctx, e, topic, reason)
				if reason == "" {
					dispatched++
				}
				continue
			}
			if reason != "" {
				r.refuse(ctx, e, topic, reason)
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-dctx.Done():
				return false, r.stopCause(ctx)
			}
			if err := r.failed(); err != nil {
				<-sem
				return false, err
			}
			if r.watch.due() {
				abort, err := r.watch.check(dctx, false)
				if err != nil {
					r.log.WarnContext(ctx, "replay: re-failure check failed", slog.Any("error", err))
				}
				if abort {
					<-sem
					return false, fmt.Errorf("%w: %d in a row (AbortAfter %d)", ErrAborted, r.watch.consecutiveNow(), r.o.AbortAfter)
				}
			}
			if err := lim.Wait(dctx); err != nil {
				<-sem
				return false, r.stopCause(ctx)
			}
			msg := r.build(e)
			r.mu.Lock()
			r.inflight = append(r.inflight, e.Seq)
			r.mu.Unlock()
			dispatched++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := r.publish(ctx, e, topic, msg); err != nil {
					r.fail(err)
					cancel()
				}
			}()
		}
		if len(page) < pageSize {
			return false, nil
		}
	}
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
func (r *runner) decide(ctx context.Context, e dlq.Entry) (topic, reason string) {
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
func (r *runner) retentionGuard(ctx context.Context, e dlq.Entry) string {
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
		return "the dedup retention is unknown (no " + dlq.KeyRetention + " in the envelope, no DefaultRetention): the record may be gone"
	case e.Reason == dlq.ReasonConflict:
		// The record is the other payload's: its last write came before
		// this message's first attempt, up to a whole retention earlier,
		// so it may expire at any moment after the dead letter.
		return "conflict: the dedup record is the other payload's, written before this message came, up to a retention earlier; its expiry is unknown without the store (Options.Store, --store)"
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
func earliestWrite(e dlq.Entry) time.Time {
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
func retentionOf(e dlq.Entry, def time.Duration) (time.Duration, bool) {
	if s := e.Message.Metadata.Get(dlq.KeyRetention); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			return d, true
		}
	}
	return def, def > 0
}

// build returns the message that replays e: the original payload, UUID
// and metadata without the envelope's keys, plus the replay's keys.
func (r *runner) build(e dlq.Entry) *message.Message {
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
		id = NewKeyFor(r.run.ID, e.ID)
		md[r.o.KeyMetadata] = id
	}
	msg := message.NewMessage(id, slices.Clone(src.Payload))
	msg.Metadata = md
	return msg
}

// newKeySpace is the UUIDv5 namespace of the keys NewKey mints.
var newKeySpace = uuid.MustParse("a0c4f1d2-6b0e-4f57-9d0c-3c1f5e2b7a91")

// NewKeyFor is the UUID (and operation key) that a NewKey run runID gives
// the replay of entry entryID: derived from both, so every publish of one
// entry by one run carries the same key.
func NewKeyFor(runID, entryID string) string {
	return uuid.NewSHA1(newKeySpace, []byte(runID+"\x00"+entryID)).String()
}

func (r *runner) publish(ctx context.Context, e dlq.Entry, topic string, msg *message.Message) error {
	span := r.startSpan(ctx, e, topic, msg)
	err := r.pub.Publish(topic, msg)
	endSpan(span, err)
	if err != nil {
		return fmt.Errorf("replay: publish entry %s to %q: %w", e.ID, topic, err)
	}
	at := r.o.Clock.Now()
	// The publish happened: record it even when ctx has ended.
	ctx = context.WithoutCancel(ctx)
	markErr := r.archive.MarkReplayed(ctx, e.ID, r.run.ID)
	r.watch.track(e, msg)
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

func (r *runner) refuse(ctx context.Context, e dlq.Entry, topic, reason string) {
	r.log.WarnContext(ctx, "replay: refused", slog.String("entry", e.ID), slog.String("reason", reason))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight = append(r.inflight, e.Seq)
	r.res.Refused++
	r.run.Refused++
	r.finishLocked(e.Seq)
	r.report(Progress{EntryID: e.ID, Seq: e.Seq, Topic: topic, Action: ActionRefused, Reason: reason})
}

func (r *runner) dryRun(ctx context.Context, e dlq.Entry, topic, reason string) {
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

// save stores the run's state; saves are serialized so a later cursor is
// never overwritten by an earlier one.
func (r *runner) save(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.run.Updated = r.o.Clock.Now()
	if err := r.archive.SaveReplay(ctx, r.run); err != nil {
		return fmt.Errorf("replay: save run: %w", err)
	}
	return nil
}

// startSpan starts the span of one publish when a TracerProvider is set,
// and puts it in msg's context for the publisher (a no-op span otherwise).
func (r *runner) startSpan(ctx context.Context, e dlq.Entry, topic string, msg *message.Message) trace.Span {
	if r.o.TracerProvider == nil {
		return noop.Span{}
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", topic),
			attribute.String("messaging.message.id", msg.UUID),
			attribute.String("surely.replay_id", r.run.ID),
			attribute.String("surely.replay_of", e.ID),
		),
	}
	if tp := e.Message.Metadata.Get(dlq.KeyDeadLetterTraceparent); tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp}
		if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier)); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
				Attributes: []attribute.KeyValue{attribute.String("surely.link", "dead_letter")}}))
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
