package console

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/surely-dev/surely/dlq/archive"
)

// server serves the console's pages over a source.
type server struct {
	src   source
	c     config
	pages map[string]*template.Template
	chart *template.Template
	h     http.Handler // the pages and actions, behind secure

	mu      sync.Mutex
	running map[string]*activeRun // the runs this console is running, by ID
	closed  bool                  // close was called: no run starts
}

// activeRun is a run this console is running.
type activeRun struct {
	stop context.CancelFunc // ends the run's context
	done chan struct{}      // closed once the run's call returned (its final save is done)
}

// pageSize is the entries of one list page.
const pageSize = 50

func newServer(src source, c config) (*server, error) {
	s := &server{src: src, c: c, pages: map[string]*template.Template{}, running: map[string]*activeRun{}}
	for _, p := range []string{"overview", "list", "entry", "operation", "dryrun", "run", "runs", "error"} {
		t, err := template.New("layout.html").Funcs(funcs(c)).ParseFS(assets, "templates/layout.html", "templates/timeline.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	var err error
	if s.chart, err = template.New("chart.svg").Funcs(funcs(c)).ParseFS(assets, "templates/chart.svg"); err != nil {
		return nil, fmt.Errorf("console: template chart: %w", err)
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /chart.svg", s.chartSVG)
	mux.HandleFunc("GET /list", s.list)
	mux.HandleFunc("GET /entry", s.entry)
	mux.HandleFunc("GET /operation", s.operation)
	mux.HandleFunc("GET /run", s.run)
	mux.HandleFunc("GET /runs", s.runs)
	mux.HandleFunc("POST /dry-run", s.action(s.dryRun))
	mux.HandleFunc("POST /replay", s.action(s.replay))
	mux.HandleFunc("POST /resume", s.action(s.resume))
	mux.HandleFunc("POST /cancel", s.action(s.cancel))
	mux.HandleFunc("POST /reconcile", s.action(s.reconcile))
	mux.HandleFunc("POST /discard", s.action(s.discard))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.h = secure(c, mux)
	return s, nil
}

// close ends the context of every run this console runs, refuses new
// ones, and waits until each run's call returned or ctx ends.
func (s *server) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	runs := make([]*activeRun, 0, len(s.running))
	for _, run := range s.running {
		run.stop()
		runs = append(runs, run)
	}
	s.mu.Unlock()
	for _, run := range runs {
		select {
		case <-run.done:
		case <-ctx.Done():
			return fmt.Errorf("console: replay runs are still stopping: %w", context.Cause(ctx))
		}
	}
	return nil
}

// page is what every template gets.
type page struct {
	Title    string
	Who      string
	ReadOnly bool
	Data     any
}

// render writes template name with data, or a 500 when it fails (the
// page is rendered into a buffer first, so no half page is sent).
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	var buf bytes.Buffer
	err := s.pages[name].Execute(&buf, page{Title: title, Who: whoOf(r), ReadOnly: s.c.readOnly, Data: data})
	if err != nil {
		s.c.log.ErrorContext(r.Context(), "console: rendering a page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page: status and a message for the operator;
// err, when not nil, is logged and its (redacted) text shown.
func (s *server) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		s.c.log.ErrorContext(r.Context(), "console: "+msg, "error", err)
		msg += ": " + s.redact(err.Error())
	}
	s.render(w, r, status, "error", http.StatusText(status), msg)
}

// action wraps a POST handler: refused in read-only mode.
func (s *server) action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.c.readOnly {
			s.fail(w, r, http.StatusForbidden, "the console is read-only", nil)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, http.StatusBadRequest, "the form could not be read", err)
			return
		}
		h(w, r)
	}
}

// count is one row of a breakdown.
type count struct {
	Name string
	N    int
}

// sorted lists m's counts, largest first, then by name.
func sorted(m map[string]int) []count {
	out := make([]count, 0, len(m))
	for k, n := range m {
		out = append(out, count{k, n})
	}
	slices.SortFunc(out, func(a, b count) int { return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(a.Name, b.Name)) })
	return out
}

// failureGroup is one row of the overview's failure groups.
type failureGroup struct {
	Type, Site string
	N          int
}

// failureGroups lists m's groups, largest first, then by type and site.
func failureGroups(m map[[2]string]int) []failureGroup {
	out := make([]failureGroup, 0, len(m))
	for k, n := range m {
		out = append(out, failureGroup{k[0], k[1], n})
	}
	slices.SortFunc(out, func(a, b failureGroup) int {
		return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(a.Type, b.Type), strings.Compare(a.Site, b.Site))
	})
	return out
}

type overviewData struct {
	Stats                               archive.Stats
	OldestAge                           string
	Groups                              []failureGroup
	Reasons, Topics, Handlers, ErrTypes []count
	States                              []count // every entry, by lifecycle state
}

func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	st, err := s.src.stats(r.Context(), archive.Filter{States: []archive.State{archive.StateOpen}})
	var all archive.Stats
	if err == nil {
		all, err = s.src.stats(r.Context(), archive.Filter{})
	}
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, "the archive could not be read", err)
		return
	}
	now := s.c.now()
	d := overviewData{
		Stats: st, Reasons: sorted(st.ByReason), Topics: sorted(st.ByTopic),
		Handlers: sorted(st.ByHandler), ErrTypes: sorted(st.ByErrorType), States: sorted(all.ByState),
		Groups: failureGroups(st.ByFailureGroup),
	}
	if st.Total > 0 {
		d.OldestAge = age(now.Sub(st.Oldest))
	}
	s.render(w, r, http.StatusOK, "overview", "Dead letters", d)
}

// chartSVG serves the arrivals chart as an SVG image: the overview shows
// it as an <img>, so the page does not wait for it.
func (s *server) chartSVG(w http.ResponseWriter, r *http.Request) {
	ch, err := s.arrivals(r.Context(), s.c.now())
	if err != nil {
		s.c.log.ErrorContext(r.Context(), "console: the arrivals chart", "error", err)
		http.Error(w, "the archive could not be read", http.StatusBadGateway)
		return
	}
	var buf bytes.Buffer
	if err := s.chart.Execute(&buf, ch); err != nil {
		http.Error(w, "the chart could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	_, _ = w.Write(buf.Bytes())
}

// chartWindow and chartBuckets shape the arrivals chart: the last 24
// hours by hour; chartBudget bounds the entries read for it.
const (
	chartWindow  = 24 * time.Hour
	chartBuckets = 24
	chartBudget  = 10000
)

// arrivals counts the entries dead-lettered in the last chartWindow, by
// bucket: in one query where the archive has one (dlq/sqlarchive), else
// reading at most chartBudget entries without payloads.
func (s *server) arrivals(ctx context.Context, now time.Time) (chart, error) {
	start := now.Add(-chartWindow)
	if counts, ok, err := s.src.arrivals(ctx, start, chartWindow/chartBuckets, chartBuckets); err != nil {
		return chart{}, err
	} else if ok {
		return newChart(start, counts, false), nil
	}
	counts := make([]int, chartBuckets)
	// The first bucket includes its start, as the archive's query does
	// (DeadLetteredAfter excludes its time).
	f := archive.Filter{DeadLetteredAfter: start.Add(-time.Nanosecond)}
	p := archive.Page{Limit: 1000, OmitPayload: true}
	read := 0
	for read < chartBudget {
		es, err := s.src.list(ctx, f, p)
		if err != nil {
			return chart{}, err
		}
		for _, e := range es {
			i := int(e.DeadLetteredAt.Sub(start) * chartBuckets / chartWindow)
			if i >= 0 && i < chartBuckets {
				counts[i]++
			}
		}
		read += len(es)
		if len(es) < p.Limit {
			return newChart(start, counts, false), nil
		}
		p.After = es[len(es)-1].Seq
	}
	return newChart(start, counts, true), nil
}

type listData struct {
	Query    query
	Matching int // entries the whole filter selects; -1: not counted (see query.counted)
	Entries  []archive.Entry
	Next     int64
	Err      string
	First    bool
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r.URL.Query(), s.c.now())
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "list", "Dead letters", listData{Query: q, Err: err.Error()})
		return
	}
	d := listData{Query: q, First: q.After == 0, Matching: -1}
	// One more than a page tells whether there is a next one.
	es, err := s.src.list(r.Context(), q.filter, archive.Page{After: q.After, Limit: pageSize + 1, OmitPayload: true})
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, "the archive could not be read", err)
		return
	}
	if len(es) > pageSize {
		es = es[:pageSize]
		d.Next = es[pageSize-1].Seq
	}
	d.Entries = es
	if q.counted() || r.URL.Query().Get("count") == "1" {
		st, err := s.src.stats(r.Context(), q.filter)
		if err != nil {
			s.fail(w, r, http.StatusBadGateway, "the archive could not be read", err)
			return
		}
		d.Matching = st.Total
	}
	s.render(w, r, http.StatusOK, "list", "Dead letters", d)
}

func (s *server) entry(w http.ResponseWriter, r *http.Request) {
	id, ok := s.id(w, r, "entry")
	if !ok {
		return
	}
	e, err := s.src.get(r.Context(), id)
	if !s.found(w, r, err, "archived dead letter (it may have been purged)") {
		return
	}
	show := !s.c.hiddenPayloads || r.URL.Query().Get("payload") == "1"
	s.render(w, r, http.StatusOK, "entry", "Dead letter "+e.ID, s.entryView(e, show))
}

// runData is a run as its page shows it.
type runData struct {
	archive.ReplayRun
	Active    bool    // running in this console: it can be canceled here
	Remaining int     // entries not replayed yet (about: refused ones are left out)
	Rate      string  // replays per second since the start
	Store     bool    // the console has a dedup store: it can check outcomes
	Checked   *result // the outcomes just checked (replay.Reconcile)
}

func (s *server) run(w http.ResponseWriter, r *http.Request) {
	id, ok := s.id(w, r, "run")
	if !ok {
		return
	}
	d, err := s.runData(r.Context(), id)
	if !s.found(w, r, err, "replay run") {
		return
	}
	s.render(w, r, http.StatusOK, "run", "Replay run "+id, d)
}

// runData reads run id as its page shows it; errNotFound when no run
// has this ID.
func (s *server) runData(ctx context.Context, id string) (runData, error) {
	s.mu.Lock()
	_, active := s.running[id]
	s.mu.Unlock()
	run, err := s.src.loadRun(ctx, id)
	if errors.Is(err, errNotFound) && active {
		// Started, not saved yet.
		run, err = archive.ReplayRun{ID: id, State: archive.RunRunning}, nil
	}
	if err != nil {
		return runData{}, err
	}
	// A run saved done is over, even before its call has returned: there
	// is nothing left to cancel.
	d := runData{ReplayRun: run, Active: active && run.State != archive.RunDone, Store: s.c.store != nil}
	f := run.Filter
	if !slices.Equal(f.States, []archive.State{archive.StateOpen}) {
		// A run of open entries moves each one it replays out of
		// open: its filter alone selects the rest, and the archive counts
		// it without reading the entries (the page refreshes itself
		// while the run runs). Any other selection excludes the run's.
		f.NotReplayedBy = run.ID
	}
	if st, err := s.src.stats(ctx, f); err == nil {
		d.Remaining = max(0, st.Total-run.Refused)
	}
	if secs := run.Updated.Sub(run.Started).Seconds(); secs > 0 && run.Replayed > 0 {
		d.Rate = fmt.Sprintf("%.1f/s", float64(run.Replayed)/secs)
	}
	return d, nil
}

// maxRuns bounds the runs the runs page lists.
const maxRuns = 200

func (s *server) runs(w http.ResponseWriter, r *http.Request) {
	runs, err := s.src.runs(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, "the archive could not be read", err)
		return
	}
	if len(runs) > maxRuns {
		runs = runs[:maxRuns]
	}
	s.render(w, r, http.StatusOK, "runs", "Replay runs", runs)
}

// id reads the id parameter; when it is missing or invalid, it renders
// 400 and returns false.
func (s *server) id(w http.ResponseWriter, r *http.Request, what string) (string, bool) {
	id := r.URL.Query().Get("id")
	if err := checkField(id); err != nil || id == "" {
		s.fail(w, r, http.StatusBadRequest, "the "+what+" ID is missing or not valid", nil)
		return "", false
	}
	return id, true
}

// found renders 404 (no what has this ID) or 502 (the archive failed)
// for a lookup's err, and returns whether it succeeded.
func (s *server) found(w http.ResponseWriter, r *http.Request, err error, what string) bool {
	switch {
	case errors.Is(err, errNotFound):
		s.fail(w, r, http.StatusNotFound, "no "+what+" has this ID", nil)
		return false
	case err != nil:
		s.fail(w, r, http.StatusBadGateway, "the archive could not be read", err)
		return false
	}
	return true
}

// whoOf is the caller as the authorization named it.
func whoOf(r *http.Request) string {
	who, _ := r.Context().Value(whoKey{}).(string)
	return who
}

func withWho(r *http.Request, who string) context.Context {
	return context.WithValue(r.Context(), whoKey{}, who)
}

// audit writes the audit line of an action.
func (s *server) audit(r *http.Request, action string, attrs ...any) {
	s.c.log.InfoContext(r.Context(), "console: "+action, append([]any{slog.String("who", whoOf(r))}, attrs...)...)
}
