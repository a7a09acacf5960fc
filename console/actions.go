package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/internal/runcancel"
)

// maxRefusedShown bounds the refused entries a dry run lists.
const maxRefusedShown = 200

// refusal is one entry the retention guard refuses, and why.
type refusal struct{ ID, Reason string }

type dryRunData struct {
	Query       query
	Would       int
	Refused     []refusal
	RefusedN    int
	Err         string
	Rate        string
	Max         string
	ConfirmNeed bool
}

// selection reads the POSTed selection.
func (s *server) selection(r *http.Request) (query, error) {
	q, err := parseQuery(r.PostForm, s.c.now())
	if err == nil && r.PostForm.Get("scope") == "selected" && len(q.IDs) == 0 {
		err = fmt.Errorf("no entry selected: tick entries, or replay all matching the filter")
	}
	return q, err
}

// dryRun shows what a replay of the selection would do: the count, and
// every entry the retention guard refuses and why.
func (s *server) dryRun(w http.ResponseWriter, r *http.Request) {
	q, err := s.selection(r)
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay: dry run", dryRunData{Query: q, Err: err.Error()})
		return
	}
	d := dryRunData{Query: q}
	opts := append(append([]dlq.Option{}, s.c.replayOpts...), replay.WithDryRun(), replay.WithProgress(func(p replay.Progress) {
		if p.Action != replay.ActionWouldRefuse {
			return
		}
		d.RefusedN++
		if len(d.Refused) < maxRefusedShown {
			d.Refused = append(d.Refused, refusal{p.EntryID, s.redact(p.Reason)})
		}
	}))
	res, err := s.src.replay(r.Context(), s.c.pub, q.filter, opts...)
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay: dry run", dryRunData{Query: q, Err: s.redact(err.Error())})
		return
	}
	d.Would = res.WouldReplay
	s.audit(r, "replay dry run", "filter", q.values().Encode(), "would_replay", d.Would, "would_refuse", d.RefusedN)
	s.render(w, r, http.StatusOK, "dryrun", "Replay: dry run", d)
}

// replay starts a replay run of the selection, confirmed, at a rate and
// up to a maximum, and redirects to its page.
func (s *server) replay(w http.ResponseWriter, r *http.Request) {
	q, err := s.selection(r)
	bad := func(msg string) {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay: dry run", dryRunData{
			Query: q, Err: msg, Rate: r.PostForm.Get("rate"), Max: r.PostForm.Get("max"),
		})
	}
	if err != nil {
		bad(err.Error())
		return
	}
	rate, err := strconv.ParseFloat(r.PostForm.Get("rate"), 64)
	if err != nil || rate <= 0 || rate > 100000 {
		bad(fmt.Sprintf("rate: %q is not a number of messages per second between 0 and 100000", r.PostForm.Get("rate")))
		return
	}
	maxN := 0
	if m := r.PostForm.Get("max"); m != "" {
		if maxN, err = strconv.Atoi(m); err != nil || maxN < 0 {
			bad(fmt.Sprintf("max: %q is not a count", m))
			return
		}
	}
	if r.PostForm.Get("confirm") != "yes" {
		bad("confirm the replay: tick the box")
		return
	}
	id := uuid.NewString()
	s.audit(r, "replay started", "run", id, "filter", q.values().Encode(), "rate", rate, "max", maxN)
	err = s.start(r, id, func(ctx context.Context, progress dlq.Option) (result, error) {
		opts := append(append([]dlq.Option{}, s.c.replayOpts...), replay.WithID(id), replay.WithRate(rate), replay.WithMax(maxN), progress)
		return s.src.replay(ctx, s.c.pub, q.filter, opts...)
	})
	if errors.Is(err, errClosed) {
		s.fail(w, r, http.StatusServiceUnavailable, "the console is stopping: it starts no replay", nil)
		return
	}
	if err != nil {
		bad(s.redact(err.Error()))
		return
	}
	s.toRun(w, id)
}

// resume continues an interrupted run at a rate, up to a maximum.
func (s *server) resume(w http.ResponseWriter, r *http.Request) {
	id := r.PostForm.Get("id")
	rate, rerr := strconv.ParseFloat(r.PostForm.Get("rate"), 64)
	maxN, merr := strconv.Atoi(cmp.Or(r.PostForm.Get("max"), "0"))
	switch {
	case checkField(id) != nil || id == "":
		s.fail(w, r, http.StatusBadRequest, "the run ID is missing or not valid", nil)
		return
	case rerr != nil || rate <= 0 || rate > 100000 || merr != nil || maxN < 0:
		s.fail(w, r, http.StatusBadRequest, "rate and maximum: a number of messages per second between 0 and 100000, and a count", nil)
		return
	}
	if _, err := s.src.loadRun(r.Context(), id); !s.found(w, r, err, "replay run") {
		return
	}
	s.audit(r, "replay resumed", "run", id, "rate", rate, "max", maxN)
	err := s.start(r, id, func(ctx context.Context, progress dlq.Option) (result, error) {
		opts := append(append([]dlq.Option{}, s.c.replayOpts...), replay.WithRate(rate), replay.WithMax(maxN), progress)
		return s.src.resume(ctx, s.c.pub, id, opts...)
	})
	if errors.Is(err, errClosed) {
		s.fail(w, r, http.StatusServiceUnavailable, "the console is stopping: it starts no replay", nil)
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusConflict, "the run could not be resumed", err)
		return
	}
	s.toRun(w, id)
}

// cancel cancels a run wherever it runs: it marks the run canceled in
// the archive, as "surely dlq runs cancel" does (a replay running it, in
// any process, stops before its next publish), and ends the context of a
// run this console runs, so it stops at once. The run stays resumable. A
// run that is done is refused; a canceled one stays as it is.
func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PostForm.Get("id")
	if checkField(id) != nil || id == "" {
		s.fail(w, r, http.StatusBadRequest, "the run ID is missing or not valid", nil)
		return
	}
	s.mu.Lock()
	active, here := s.running[id]
	s.mu.Unlock()
	// The archive first: the run's own final save then reads the cancel
	// and the run is saved canceled, not interrupted.
	was, err := s.src.cancel(r.Context(), id, s.c.now())
	switch {
	case errors.Is(err, runcancel.ErrDone):
		s.fail(w, r, http.StatusConflict, "replay run "+id+" is done: every entry it selected was handled, there is nothing to cancel", nil)
		return
	case errors.Is(err, errNotFound) && here:
		// Started here, not saved yet: its context is enough.
		was.State = archive.RunRunning
	case errors.Is(err, errNotFound):
		s.fail(w, r, http.StatusNotFound, "no replay run has this ID", nil)
		return
	case err != nil && !here:
		s.fail(w, r, http.StatusBadGateway, "the run could not be canceled", err)
		return
	case err != nil:
		// The archive failed, the run is here: its context stops it.
		s.c.log.WarnContext(r.Context(), "console: the cancel could not be saved; the run is stopped here", "run", id, "error", err)
	}
	if here {
		active.stop()
	}
	s.audit(r, "replay canceled", "run", id, "was", string(was.State), "running_here", here)
	s.toRun(w, id)
}

// reconcile checks the outcomes of what a stopped run replayed
// (replay.Reconcile with the console's dedup store): the entries whose
// operation completed since are marked resolved. A running run checks
// its own, as replay's package doc says.
func (s *server) reconcile(w http.ResponseWriter, r *http.Request) {
	id := r.PostForm.Get("id")
	switch {
	case checkField(id) != nil || id == "":
		s.fail(w, r, http.StatusBadRequest, "the run ID is missing or not valid", nil)
		return
	case s.c.store == nil:
		s.fail(w, r, http.StatusConflict, "the console has no dedup store (replay.WithStore): it cannot check outcomes", nil)
		return
	}
	d, err := s.runData(r.Context(), id)
	if !s.found(w, r, err, "replay run") {
		return
	}
	if d.Active || d.State == archive.RunRunning {
		s.fail(w, r, http.StatusConflict, "replay run "+id+" is running: it checks the outcomes of its messages itself; check again once it stopped", nil)
		return
	}
	res, err := s.src.reconcile(r.Context(), s.c.store, id)
	if !s.found(w, r, err, "replay run") {
		return
	}
	s.audit(r, "replay outcomes checked", "run", id, "resolved", res.Resolved, "pending", res.Pending, "failed_again", res.Refailed)
	if d, err = s.runData(r.Context(), id); !s.found(w, r, err, "replay run") {
		return
	}
	d.Checked = &res
	s.render(w, r, http.StatusOK, "run", "Replay run "+id, d)
}

// errClosed is start's error once the console is closed.
var errClosed = errors.New("console: closed")

// start runs a replay call in the background, under a context the
// console can cancel (cancel, Close), and returns once the run is saved
// (its first decision) or the call ended; err is the call's error if it
// ended at once, errClosed once the console is closed.
func (s *server) start(r *http.Request, id string, call func(context.Context, dlq.Option) (result, error)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if _, busy := s.running[id]; busy {
		s.mu.Unlock()
		return fmt.Errorf("run %s is running already", id)
	}
	ctx, stop := context.WithCancel(context.WithoutCancel(r.Context()))
	active := &activeRun{stop: stop, done: make(chan struct{})}
	s.running[id] = active
	s.mu.Unlock()
	started := make(chan error, 1)
	signal := func(err error) {
		select {
		case started <- err:
		default:
		}
	}
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.running, id)
			s.mu.Unlock()
			stop()
			close(active.done)
		}()
		res, err := call(ctx, replay.WithProgress(func(replay.Progress) { signal(nil) }))
		signal(err)
		attrs := []any{"run", id, "replayed", res.Replayed, "refused", res.Refused, "failed_again", res.Refailed, "state", res.State}
		if err != nil {
			attrs = append(attrs, "error", s.redact(err.Error()))
		}
		s.audit(r, "replay finished", attrs...)
	}()
	// A first publish may take long (a slow broker): the run's page
	// shows a run that is starting.
	select {
	case err := <-started:
		return err
	case <-time.After(startWait):
		return nil
	}
}

// startWait bounds how long an action waits for its run's first
// decision before it shows the run's page.
const startWait = time.Second

// toRun redirects to a run's page.
func (s *server) toRun(w http.ResponseWriter, id string) {
	// Relative, so it stays under the prefix (http.Redirect would make it
	// absolute).
	w.Header().Set("Location", "run?id="+url.QueryEscape(id))
	w.WriteHeader(http.StatusSeeOther)
}

// discard moves the selection to the lifecycle's tombstone, with a reason
// and a confirmation; at most maxIDs entries at a time.
func (s *server) discard(w http.ResponseWriter, r *http.Request) {
	q, err := s.selection(r)
	why := strings.TrimSpace(r.PostForm.Get("why"))
	switch {
	case err != nil:
	case why == "" || len(why) > 1000 || strings.IndexFunc(why, unicode.IsControl) >= 0:
		err = fmt.Errorf("reason: say why, in at most 1000 characters, on one line")
	case r.PostForm.Get("confirm") != "yes":
		err = fmt.Errorf("confirm the discard: tick the box")
	}
	var ids []string
	if err == nil {
		ids, err = s.ids(r.Context(), q)
	}
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay or discard", dryRunData{Query: q, Err: s.redact(err.Error())})
		return
	}
	n := 0
	if len(ids) > 0 {
		n, err = s.src.discard(r.Context(), why, ids...)
	}
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, "the entries could not be discarded", err)
		return
	}
	s.audit(r, "discard", "filter", q.values().Encode(), "reason", why, "discarded", n)
	w.Header().Set("Location", "list?state=discarded")
	w.WriteHeader(http.StatusSeeOther)
}

// ids lists the IDs the selection selects, at most maxIDs.
func (s *server) ids(ctx context.Context, q query) ([]string, error) {
	var ids []string
	p := archive.Page{Limit: 500, OmitPayload: true}
	for {
		es, err := s.src.list(ctx, q.filter, p)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			ids = append(ids, e.ID)
		}
		if len(ids) > maxIDs {
			return nil, fmt.Errorf("more than %d entries match: narrow the filter", maxIDs)
		}
		if len(es) < p.Limit {
			return ids, nil
		}
		p.After = es[len(es)-1].Seq
	}
}
