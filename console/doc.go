// Package console is an operator's web page for the dead-letter archive:
// an http.Handler that a service mounts under a prefix of its choice
// (http.StripPrefix), or that `surely console` serves on its own.
//
//	h, err := console.New(ar,
//		console.WithAuthorize(func(r *http.Request) (string, bool) { ... }),
//		console.WithPublisher(pub),
//		replay.WithStore(store),
//		dlq.WithRedactor(redact))
//	mux.Handle("/ops/dlq/", http.StripPrefix("/ops/dlq", h))
//
// Pages: an overview (counts by reason, topic, handler and error type, the
// oldest age, arrivals of the last 24 hours as a server-rendered SVG,
// failure groups by error type linking to their entries), a list with
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
// Every use of the archive and of dlq/replay goes through one small
// internal interface (source.go).
//
// Safety: New requires WithAuthorize or WithoutAuth; WithReadOnly (or no
// WithPublisher) hides every action (replay, cancel, resume, discard); actions are POSTs behind
// http.CrossOriginProtection; every response carries a strict
// Content-Security-Policy (no script at all, styles only from the
// console); templates escape every value; payloads, error texts and
// metadata values pass the dlq.WithRedactor hook; every action writes an
// audit line (dlq.WithLogger) naming who did what. Every page works
// without JavaScript; the console serves none.
package console
