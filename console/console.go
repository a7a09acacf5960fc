package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/options"
)

//go:embed templates/*.html templates/chart.svg static/*
var assets embed.FS

// Names the options of this package record, and the names of the dlq
// options it takes (dlq records WithRedactor under this name).
const (
	nameAuthorize      = "console.WithAuthorize"
	nameWithoutAuth    = "console.WithoutAuth"
	nameReadOnly       = "console.WithReadOnly"
	namePublisher      = "console.WithPublisher"
	nameHiddenPayloads = "console.WithHiddenPayloads"
	nameTraceURL       = "console.WithTraceURL"
	nameAllowedHosts   = "console.WithAllowedHosts"
	nameRedactor       = options.Redactor
	// nameReplayStore is the name replay.WithStore records.
	nameReplayStore = options.ReplayStore
)

// replayOptions are the names of the replay options New takes as they
// are, and passes to every replay.Run and Resume it starts (one name, one
// meaning): the dedup store, the retention guard's default, the
// publishes in flight and the abort threshold.
var replayOptions = []string{nameReplayStore, options.ReplayDefaultRetention, options.ReplayConcurrency, options.ReplayAbortAfter}

// used lists every option New takes.
var used = []string{
	nameAuthorize, nameWithoutAuth, nameReadOnly, namePublisher, nameHiddenPayloads,
	nameTraceURL, nameAllowedHosts, nameRedactor, options.Logger, options.Clock,
}

// CSP is the Content-Security-Policy of every response: no inline script
// or style, nothing loaded from elsewhere, no framing, forms post only to
// the console.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// config is what New's options set.
type config struct {
	authorize      func(*http.Request) (string, bool)
	hosts          hostCheck // with checkHosts: WithAllowedHosts
	checkHosts     bool
	readOnly       bool
	pub            message.Publisher
	hiddenPayloads bool
	traceURL       string
	replayOpts     []dlq.Option
	store          idempotency.Store
	redact         func(string) string
	log            *slog.Logger
	now            func() time.Time
}

func put(name string, v any) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error { s.Put(name, v); return nil })
}

// WithAuthorize sets the function that authorizes every request of the
// console: it returns who the caller is (written into the audit line of
// every action) and whether the request may proceed; a refused request
// gets 401. New requires WithAuthorize or WithoutAuth.
func WithAuthorize(authorize func(r *http.Request) (who string, ok bool)) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if authorize == nil {
			return fmt.Errorf("%w: console.WithAuthorize: nil function", dlq.ErrInvalidOption)
		}
		s.Put(nameAuthorize, authorize)
		return nil
	})
}

// WithoutAuth says that the console does no authorization of its own
// because the handler it is mounted behind does. Every request is then
// served, and the audit line names the caller "unauthenticated". Where a
// browser can reach it, add WithAllowedHosts (DNS rebinding).
func WithoutAuth() dlq.Option { return put(nameWithoutAuth, true) }

// WithReadOnly hides every action (replay): the console only reads the
// archive and refuses every POST with 403.
func WithReadOnly() dlq.Option { return put(nameReadOnly, true) }

// WithPublisher is where a replay republishes the dead letters (each to
// its original topic). Without it the console offers no replay, as with
// WithReadOnly.
func WithPublisher(pub message.Publisher) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if pub == nil {
			return fmt.Errorf("%w: console.WithPublisher: nil publisher", dlq.ErrInvalidOption)
		}
		s.Put(namePublisher, pub)
		return nil
	})
}

// WithHiddenPayloads keeps payloads off the entry page until the operator
// asks for one (a link), so a glance at an entry does not show
// personal data.
func WithHiddenPayloads() dlq.Option { return put(nameHiddenPayloads, true) }

// WithTraceURL links trace and span IDs to a tracing UI: tmpl is an http
// or https URL in which {trace_id} and {span_id} are replaced, e.g.
// "http://jaeger:16686/trace/{trace_id}?uiFind={span_id}". Default: IDs
// are shown without links.
func WithTraceURL(tmpl string) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		u, err := url.Parse(strings.NewReplacer("{trace_id}", "t", "{span_id}", "s").Replace(tmpl))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(tmpl, "{trace_id}") {
			return fmt.Errorf("%w: console.WithTraceURL: %q is not an http(s) URL with {trace_id}", dlq.ErrInvalidOption, tmpl)
		}
		s.Put(nameTraceURL, tmpl)
		return nil
	})
}

// Console is the operator console over an archive: an http.Handler to
// mount under any prefix (http.StripPrefix), every link it writes being
// relative. It owns the replay runs it starts: Close stops them.
type Console struct{ s *server }

// ServeHTTP serves the console's pages and actions.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.s.h.ServeHTTP(w, r) }

// Close stops the console: it ends the context of every replay run the
// console started (replay and resume), and waits until each has saved its
// final state. A run stopped by Close is saved interrupted, and resumes
// from its page or with `surely dlq replay --resume`. From then on the
// console starts no run (503); its pages still answer. Call it when the
// service stops, after http.Server.Shutdown (which lets no new request
// start a run): a run whose process exits without it stays saved running,
// until an operator cancels it.
//
// Close returns ctx's error when ctx ends before every run has saved (a
// publish under way blocks it: Watermill's Publish takes no context); the
// runs still stop and save, as long as the process lives. Calling it again
// waits again for the runs still stopping, and is otherwise harmless.
// Close closes neither the archive, the publisher nor the store: the
// caller owns them.
func (c *Console) Close(ctx context.Context) error { return c.s.close(ctx) }

// New returns the console over ar, to be mounted under any prefix
// (http.StripPrefix); Close stops the replay runs it started.
//
// New requires an explicit choice of authorization: WithAuthorize or
// WithoutAuth; without one (or with both) it returns an error wrapping
// dlq.ErrInvalidOption. It takes the options of this package and
// replay.WithStore (the dedup store: the operation page shows an
// operation's record, and every replay reads it, as replay.WithStore
// says), replay.WithDefaultRetention, replay.WithConcurrency and
// replay.WithAbortAfter (passed to every replay the console starts, where
// they mean what they mean for replay.Run), dlq.WithRedactor (applied to payloads, error texts and metadata
// values before they are shown; default: none), dlq.WithLogger (the audit log:
// one line per action with who and what; default: slog.Default()) and
// dlq.WithClock (the console's now, which it also passes to every replay
// it starts: the retention guard, the rate limiter's schedule and the
// run's timestamps read it; default: time.Now).
func New(ar archive.Archive, opts ...dlq.Option) (*Console, error) {
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(dlq.ErrInvalidOption, "console.New", append(used, replayOptions...)...); err != nil {
		return nil, err
	}
	if ar == nil {
		return nil, fmt.Errorf("%w: console.New: nil archive", dlq.ErrInvalidOption)
	}
	c := config{
		authorize:      options.Get[func(*http.Request) (string, bool)](s, nameAuthorize, nil),
		hosts:          options.Get[hostCheck](s, nameAllowedHosts, nil),
		checkHosts:     s.Has(nameAllowedHosts),
		readOnly:       options.Get(s, nameReadOnly, false),
		pub:            options.Get[message.Publisher](s, namePublisher, nil),
		hiddenPayloads: options.Get(s, nameHiddenPayloads, false),
		traceURL:       options.Get(s, nameTraceURL, ""),
		replayOpts:     replayOptionsOf(opts),
		store:          options.Get[idempotency.Store](s, nameReplayStore, nil),
		redact:         options.Get[func(string) string](s, nameRedactor, nil),
		log:            options.Get(s, options.Logger, slog.Default()),
		now:            options.Get(s, options.Clock, time.Now),
	}
	noAuth := options.Get(s, nameWithoutAuth, false)
	switch {
	case c.authorize == nil && !noAuth:
		return nil, fmt.Errorf("%w: console.New needs WithAuthorize, or WithoutAuth when it is mounted behind your own authorization", dlq.ErrInvalidOption)
	case c.authorize != nil && noAuth:
		return nil, fmt.Errorf("%w: console.New: WithAuthorize and WithoutAuth exclude each other", dlq.ErrInvalidOption)
	case noAuth:
		c.authorize = func(*http.Request) (string, bool) { return "unauthenticated", true }
	}
	if c.pub == nil {
		c.readOnly = true
	}
	// The replays read the console's clock: the retention guard, the
	// rate limiter's schedule and the run's timestamps.
	c.replayOpts = append(c.replayOpts, dlq.WithClock(c.now))
	srv, err := newServer(archiveSource{ar}, c)
	if err != nil {
		return nil, err
	}
	return &Console{srv}, nil
}

// replayOptionsOf picks the replay options out of opts (already applied
// without error): those that record one of replayOptions.
func replayOptionsOf(opts []dlq.Option) []dlq.Option {
	var out []dlq.Option
	for _, o := range opts {
		one, err := options.Apply(dlq.ErrInvalidOption, []dlq.Option{o})
		if err != nil {
			continue
		}
		for _, name := range replayOptions {
			if one.Has(name) {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// who is the context key of the caller's name.
type whoKey struct{}

// secure serves next with the console's headers, after the Host check
// (WithAllowedHosts) and authorization, behind cross-origin protection
// for every non-safe method; it also turns
// the mount point without its trailing slash into a redirect, so that
// relative links resolve under the prefix.
func secure(c config, next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	inner := cop.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if c.checkHosts && !c.hosts.allows(r) {
			// The Host is not echoed: the refusal is the same for every name.
			http.Error(w, "misdirected request: this console does not answer to this Host", http.StatusMisdirectedRequest)
			return
		}
		who, ok := c.authorize(r)
		if !ok {
			h.Set("WWW-Authenticate", `Basic realm="surely console"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "" {
			// Mounted with StripPrefix("/x", ...) and asked for "/x":
			// relative links need "/x/".
			base := path.Base(strings.SplitN(r.RequestURI, "?", 2)[0])
			h.Set("Location", base+"/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/") {
			r2 := *r
			u := *r.URL
			u.Path = "/" + u.Path
			r2.URL = &u
			r = &r2
		}
		inner.ServeHTTP(w, r.WithContext(withWho(r, who)))
	})
}

var errNotFound = errors.New("not found")
