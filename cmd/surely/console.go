package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/replay"
)

// Environment variables of the console's own authentication.
const (
	envConsoleUser     = "SURELY_CONSOLE_USER"
	envConsolePassword = "SURELY_CONSOLE_PASSWORD"
	envConsoleToken    = "SURELY_CONSOLE_TOKEN"
)

type consoleFlags struct {
	listen, broker, store, traceURL string
	readOnly, hidePayloads          bool
}

func (a *app) consoleCmd() *cobra.Command {
	var cf consoleFlags
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the dead-letter console (a web page) on a local port",
		Long: `console serves the operator's web page of the archive of --archive: an
overview, a filtered list, each dead letter with its attempt timeline, and
replays (a dry run first) and discards. Without --to it is read-only.

It listens on loopback (127.0.0.1:8080) unless --listen names another
address; then it refuses to start without authentication, from the
environment:
  ` + envConsoleUser + ` and ` + envConsolePassword + `   HTTP basic authentication
  ` + envConsoleToken + `                      a bearer token (Authorization: Bearer ...)
On loopback without them, anyone on this machine can use the page, at a
loopback name with the console's port (http://localhost:8080/,
http://127.0.0.1:8080/): a request naming another Host is refused (421),
so a web page cannot reach the console through DNS rebinding. Through a
tunnel, forward the same port (ssh -L 8080:localhost:8080).

On SIGINT (Ctrl-C) it stops serving, then stops the replay runs it
started: each is saved interrupted, to be resumed from its page or with
surely dlq replay --resume.`,
		Example: `  surely console --archive sqlite:/var/lib/app/dlq.db
  surely console --archive postgres://... --to nats://localhost:4222 --store postgres://...
  SURELY_CONSOLE_TOKEN=... surely console --archive redis://... --listen 0.0.0.0:8080`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runConsole(cmd, &cf) },
	}
	fl := cmd.Flags()
	fl.String("archive", "", "dead-letter archive URL: redis://, postgres://, mysql://, sqlite:PATH")
	envFlag(cmd, "archive", "SURELY_ARCHIVE_URL")
	fl.StringVar(&cf.listen, "listen", "127.0.0.1:8080", "address to listen on (not loopback: needs authentication)")
	fl.StringVar(&cf.broker, "to", "", "broker URL replays republish to: "+brokerSchemes+" (none: read-only)")
	envFlag(cmd, "to", "SURELY_BROKER_URL")
	fl.StringVar(&cf.store, "store", "", "idempotency store URL: the operation page shows its records; replays read them (optional)")
	envFlag(cmd, "store", "SURELY_STORE_URL")
	fl.String("store-prefix", "", `key prefix of the Redis store (default "surely:")`)
	fl.String("store-table", "", `table of the SQL store (default "surely_inbox")`)
	fl.BoolVar(&cf.readOnly, "read-only", false, "offer no action")
	fl.BoolVar(&cf.hidePayloads, "hide-payloads", false, "show a payload only when asked for (a click)")
	fl.StringVar(&cf.traceURL, "trace-url", "", "trace UI URL with {trace_id} and {span_id}, e.g. http://jaeger:16686/trace/{trace_id}")
	envFlag(cmd, "trace-url", "SURELY_TRACE_URL")
	return cmd
}

// consoleAuth is the authorization the environment configures, or nil.
func (a *app) consoleAuth() func(*http.Request) (string, bool) {
	user, pass, token := a.env(envConsoleUser), a.env(envConsolePassword), a.env(envConsoleToken)
	same := func(x, y string) bool { return subtle.ConstantTimeCompare([]byte(x), []byte(y)) == 1 }
	switch {
	case token != "":
		return func(r *http.Request) (string, bool) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			return "token", ok && same(got, token)
		}
	case user != "" && pass != "":
		return func(r *http.Request) (string, bool) {
			u, p, ok := r.BasicAuth()
			return u, ok && same(u, user) && same(p, pass)
		}
	}
	return nil
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a *app) runConsole(cmd *cobra.Command, cf *consoleFlags) error {
	auth := a.consoleAuth()
	if _, _, err := net.SplitHostPort(cf.listen); err != nil {
		return usageErr("--listen %q: %w", cf.listen, err)
	}
	if auth == nil && !loopback(cf.listen) {
		return usageErr("--listen %s is not a loopback address: set %s and %s, or %s, to require authentication",
			cf.listen, envConsoleUser, envConsolePassword, envConsoleToken)
	}
	// The console reads the command's clock, as a replay does: its pages'
	// ages, the retention guard and the runs' timestamps.
	opts := []dlq.Option{dlq.WithLogger(slog.New(slog.NewTextHandler(a.stderr, nil))), dlq.WithClock(a.now)}
	if auth != nil {
		opts = append(opts, console.WithAuthorize(auth))
	} else {
		// A browser page on a name rebound to loopback (DNS rebinding)
		// reaches the console same-origin: only a loopback Host on the
		// console's port is served.
		opts = append(opts, console.WithoutAuth(), console.WithAllowedHosts())
	}
	if cf.readOnly {
		opts = append(opts, console.WithReadOnly())
	}
	if cf.hidePayloads {
		opts = append(opts, console.WithHiddenPayloads())
	}
	if cf.traceURL != "" {
		opts = append(opts, console.WithTraceURL(cf.traceURL))
	}
	conn, err := a.openArchive(cmd)
	if err != nil {
		return err
	}
	defer conn.close()
	if cf.broker != "" && !cf.readOnly {
		pub, err := a.openBroker(cf.broker)
		if err != nil {
			return err
		}
		defer func() { _ = pub.Close() }()
		opts = append(opts, console.WithPublisher(pub))
	}
	if cf.store != "" {
		st, err := a.openStore(cmd)
		if err != nil {
			return err
		}
		defer st.close()
		opts = append(opts, replay.WithStore(st.Store))
	}
	h, err := console.New(conn.Archive, opts...)
	if err != nil {
		return withCode(exitUsage, err)
	}
	return a.serveConsole(cmd.Context(), cf.listen, h)
}

// serveConsole serves h on addr until ctx ends, then stops the server and
// the console's replay runs (each saved interrupted).
func (a *app) serveConsole(ctx context.Context, addr string, h *console.Console) error {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fprintf(a.stdout, "surely console: http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return errors.Join(err, closeConsole(ctx, h))
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shut)
	if err == nil {
		if err = <-done; errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	// After the server: no request starts a run any more.
	return errors.Join(err, closeConsole(ctx, h))
}

// closeConsole stops the console's replay runs, waiting at most
// consoleCloseWait for their final saves.
func closeConsole(ctx context.Context, h *console.Console) error {
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), consoleCloseWait)
	defer cancel()
	if err := h.Close(stop); err != nil {
		return fmt.Errorf("%w (a run not saved yet stays saved running: cancel it from its page or with surely dlq runs cancel)", err)
	}
	return nil
}

// consoleCloseWait bounds how long the console waits for its runs' final
// saves on shutdown (a publish under way cannot be interrupted).
const consoleCloseWait = 10 * time.Second
