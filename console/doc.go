// Package console is an operator's web page for the dead-letter archive:
// an http.Handler that a service mounts under a prefix of its choice
// (http.StripPrefix), or that `surely console` serves on its own.
//
//	c, err := console.New(ar,
//		console.WithAuthorize(func(r *http.Request) (string, bool) { ... }),
//		console.WithPublisher(pub),
//		replay.WithStore(store),
//		dlq.WithRedactor(redact))
//	mux.Handle("/ops/dlq/", http.StripPrefix("/ops/dlq", c))
//	...
//	_ = srv.Shutdown(ctx) // then:
//	_ = c.Close(ctx)      // the runs it started are saved interrupted
//
// Pages: an overview (counts by reason, topic, handler and error type, the
// oldest age, arrivals of the last 24 hours as a server-rendered SVG,
// failure groups by error type and call site linking to their entries), a list with
// filters and keyset pagination, an entry (payload as JSON, text or hex;
// metadata; envelope; the attempt timeline with the process that ran
// each attempt and trace links), an
// operation (its record in the dedup store, its dead letters and their
// replays), and a replay: a dry run first (the count and every entry the
// retention guard refuses, and why), then rate, maximum and confirmation,
// and the run's page with its progress, cancel and resume; the runs; and
// a discard (the lifecycle's tombstone) with a reason. Pages count and
// list open entries unless a state is chosen.
//
// A list page reads one page of entries (keyset, an index range) and
// counts its filter when the archive counts it without reading the
// entries: a filter by state, reason, topic, handler, error type and call site
// (Archive.Stats of those is a lookup in dlq/sqlarchive's counts;
// dlq/redisarchive reads every entry's summary for it). A search (key or
// error text), an exact key, a time window or a replay run is
// counted on request (the page's "count" link, count=1), because its count
// reads every entry it selects; a replay's dry run counts it in any case.
//
// # Runs: cancel, resume, outcomes
//
// The run page cancels any run that is not done, wherever it runs: the
// console saves it canceled in the archive, as "surely dlq runs cancel"
// does, and a replay running it in any process stops before its next
// publish; a run this console runs also has its context ended, so it
// stops at once. A run whose process died (it still reads running) is
// canceled the same way. A run that is done is refused; a canceled run is
// resumed from its page like an interrupted one.
//
// With replay.WithStore, a run resolves the entries whose replayed
// operation it sees completed (their dedup record DONE) while it runs. A
// consumer usually finishes later: the page of a stopped run offers
// "Check outcomes", which calls replay.Reconcile for the run, marks
// resolved the entries whose operation completed since, and shows how
// many were resolved, are still pending, and failed again. The entry page
// and the list (state resolved) show them resolved.
//
// The console passes its clock (dlq.WithClock) to every replay it starts:
// the retention guard, the rate limiter and the run's timestamps read it.
//
// # Stopping: Close
//
// The replays the console starts (replay, resume) run in the background,
// beyond the request that started them. Console.Close ends their contexts
// and waits, within its own context, until each has saved its final
// state: interrupted, resumable from the run's page. Call it when the
// service stops, after http.Server.Shutdown; `surely console` does on
// SIGINT. A process that exits without it leaves its runs
// saved running, until an operator cancels them (above).
//
// # Host check: DNS rebinding
//
// A console without authentication (WithoutAuth) that a browser can reach
// is open to DNS rebinding: a page on attacker.example, whose name then
// resolves to the console's address, is same-origin with it to the
// browser, which sends Sec-Fetch-Site: same-origin, so
// http.CrossOriginProtection lets its POSTs through, and the page can
// read the responses. Its requests carry its own name as Host:
// WithAllowedHosts refuses (421 Misdirected Request, before anything is
// read) every Host that is not a loopback name or address (localhost,
// 127.0.0.0/8, ::1) with the console's port, or one of the hosts it
// lists. `surely console` without credentials serves with it.
//
// The console's port, when it is mounted, is the port of the local
// address of the request's connection (http.LocalAddrContextKey, which
// http.Server sets): the console needs no configuration of where it
// listens, and a loopback Host on any other port is refused. A request
// with no local TCP address (a Unix socket, a handler called without a
// server) matches only the listed hosts. Behind a reverse proxy the Host
// is the proxy's public name: list it (a name without a port matches on
// any port, one with a port on that port only). A proxy that rewrites the
// Host to the console's loopback address passes the check for every
// request: check the name at the proxy then.
//
// Every use of the archive and of dlq/replay goes through one small
// internal interface (source.go).
//
// Safety: New requires WithAuthorize or WithoutAuth; WithAllowedHosts
// refuses a request naming another host (DNS rebinding); WithReadOnly (or no
// WithPublisher) hides every action (replay, cancel, resume, check
// outcomes, discard); actions are POSTs behind
// http.CrossOriginProtection; every response carries a strict
// Content-Security-Policy (no script at all, styles only from the
// console); templates escape every value; payloads, error texts and
// metadata values pass the dlq.WithRedactor hook; every action writes an
// audit line (dlq.WithLogger) naming who did what. Every page works
// without JavaScript; the console serves none.
package console
