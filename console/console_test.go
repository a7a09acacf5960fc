package console_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/envelope"
)

func TestNewRequiresAnAuthorizationChoice(t *testing.T) {
	ar := newArchive(t)
	allow := func(*http.Request) (string, bool) { return "ops", true }
	for name, opts := range map[string][]dlq.Option{
		"none":              nil,
		"both":              {console.WithAuthorize(allow), console.WithoutAuth()},
		"nil authorize":     {console.WithAuthorize(nil)},
		"nil publisher":     {console.WithoutAuth(), console.WithPublisher(nil)},
		"option not taken":  {console.WithoutAuth(), dlq.WithRetention(time.Hour)},
		"nil option":        {console.WithoutAuth(), nil},
		"javascript trace":  {console.WithoutAuth(), console.WithTraceURL("javascript:alert(1)//{trace_id}")},
		"trace without ids": {console.WithoutAuth(), console.WithTraceURL("https://jaeger/")},
	} {
		if _, err := console.New(ar, opts...); !errors.Is(err, dlq.ErrInvalidOption) {
			t.Errorf("%s: New = %v, want an error wrapping dlq.ErrInvalidOption", name, err)
		}
	}
	if _, err := console.New(nil, console.WithoutAuth()); !errors.Is(err, dlq.ErrInvalidOption) {
		t.Errorf("nil archive: New = %v, want ErrInvalidOption", err)
	}
	if _, err := console.New(ar, console.WithAuthorize(allow)); err != nil {
		t.Errorf("WithAuthorize alone: %v", err)
	}
}

func TestPagesCarryASecurityPolicy(t *testing.T) {
	srv := serve(t, newArchive(t, letter{uuid: "m1", topic: "orders"}), console.WithoutAuth())
	for _, path := range []string{"/", "/list", "/entry?id=" + envelope.DeadLetterUUID("m1"), "/static/style.css", "/entry?id=nope"} {
		resp, err := srv.Client().Do(request(t, http.MethodGet, srv.URL+path, nil))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy = %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
	}
}

func TestOverviewCountsAndGroups(t *testing.T) {
	ar := newArchive(t,
		letter{uuid: "a", topic: "orders", handler: "charge", err: fmt.Errorf("wrap: %w", context.DeadlineExceeded)},
		letter{uuid: "b", topic: "orders", handler: "charge", reason: dlq.ReasonPermanent,
			md: map[string]string{"surely_error_site": "billing.(*Gateway).Charge (gateway.go:42)"}},
		letter{uuid: "c", topic: "invoices", handler: "mail", at: t0.Add(-30 * time.Hour)},
	)
	srv := serve(t, ar, console.WithoutAuth())
	code, page := get(t, srv, "/")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, page)
	}
	for _, want := range []string{
		`id="total">3<`, `<img class="chart" src="chart.svg"`, `href="list?topic=orders">orders</a>`,
		`href="list?reason=permanent"`, `href="list?errtype=context.deadlineExceededError"`,
		`1d6h`, // the oldest age
	} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	// Failure groups by error type and call site: b's group links to b.
	site := `<code>billing.(*Gateway).Charge (gateway.go:42)</code>`
	i := strings.Index(page, site)
	if i < 0 || strings.Count(page, site) != 1 {
		t.Fatalf("the overview has no failure group of b's call site:\n%s", page)
	}
	link := page[strings.LastIndex(page[:i], `href="`)+len(`href="`):]
	link = strings.ReplaceAll(link[:strings.Index(link, `"`)], "&amp;", "&")
	_, list := get(t, srv, "/"+link)
	if !strings.Contains(list, `id="matching"><b>1</b>`) || strings.Count(list, `class="entry"`) != 1 {
		t.Fatalf("the call site's group (%s) does not list b alone", link)
	}
	entry := list[strings.Index(list, `class="entry" href="`)+len(`class="entry" href="`):]
	if _, page := get(t, srv, "/"+entry[:strings.Index(entry, `"`)]); !strings.Contains(page, site) {
		t.Error("the entry page does not show the call site")
	}
	resp, err := srv.Client().Do(request(t, http.MethodGet, srv.URL+"/chart.svg", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	svg := body(t, resp)
	if resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(svg, ">2 in the last 24 hours, most 2 in an hour<") ||
		!strings.Contains(svg, "2026-11-30 11:00:00.000Z: 2</title>") {
		t.Errorf("the chart: %s\n%s", resp.Header.Get("Content-Type"), svg)
	}
	if strings.Contains(page, "<script") {
		t.Error("the overview has a script element")
	}
}

// The chart over a SQL archive counts in one query (archive.ArrivalCounter)
// what the memory archive's fallback counts by listing: the same image.
func TestChartOverSQLCountsInTheArchive(t *testing.T) {
	letters := []letter{
		{uuid: "a", at: t0.Add(-time.Hour)}, {uuid: "b", at: t0.Add(-time.Hour)},
		{uuid: "c", at: t0.Add(-3 * time.Hour)}, {uuid: "d", at: t0.Add(-30 * time.Hour)},
		{uuid: "e", at: t0.Add(-24 * time.Hour)}, // the window's first instant
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "dlq.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ar, err := sqlarchive.New(db, sqlstore.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if err := ar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, l := range letters {
		if err := ar.Publish("dlq", deadLetter(l)); err != nil {
			t.Fatal(err)
		}
	}
	chart := func(ar archive.Archive) string {
		_, svg := get(t, serve(t, ar, console.WithoutAuth()), "/chart.svg")
		return svg
	}
	sqlChart, memChart := chart(ar), chart(newArchive(t, letters...))
	if !strings.Contains(sqlChart, ">4 in the last 24 hours, most 2 in an hour<") || sqlChart != memChart {
		t.Errorf("the SQL archive's chart:\n%s\nthe memory archive's:\n%s", sqlChart, memChart)
	}
	// The SQL chart reads the dead-lettering times only: with every
	// entry's metadata unreadable, listing fails and the chart is the same.
	if _, err := db.ExecContext(t.Context(), `UPDATE "surely_dlq_entries" SET metadata = x'05ff'`); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth())
	if code, _ := get(t, srv, "/list"); code != http.StatusBadGateway {
		t.Fatalf("listing corrupt entries: status %d, want 502", code)
	}
	if _, svg := get(t, srv, "/chart.svg"); svg != sqlChart {
		t.Errorf("the chart over corrupt metadata is not the archive's count:\n%s", svg)
	}
}

// An archive that cannot be read (its database gone) gives every page a
// 502 with the reason logged, the chart included: no panic, no partial page.
func TestArchiveOutageIsABadGateway(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "dlq.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	ar, err := sqlarchive.New(db, sqlstore.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if err := ar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth())
	_ = db.Close()
	for _, path := range []string{"/", "/chart.svg", "/list", "/list?q=x&count=1", "/entry?id=x", "/runs"} {
		if code, _ := get(t, srv, path); code != http.StatusBadGateway {
			t.Errorf("%s over a closed database: status %d, want 502", path, code)
		}
	}
}

func TestHostileValuesAreEscaped(t *testing.T) {
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	ar := newArchive(t, letter{
		uuid: "evil", topic: evil, handler: evil, key: evil, err: errors.New(evil),
		payload: []byte(`{"name":"` + strings.ReplaceAll(evil, `"`, `'`) + `"}`),
		md:      map[string]string{"x-note": evil, evil: "v"},
	})
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}))
	id := envelope.DeadLetterUUID("evil")
	for _, path := range []string{"/", "/list", "/entry?id=" + id, "/list?topic=" + url.QueryEscape(evil)} {
		code, page := get(t, srv, path)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d", path, code)
		}
		if strings.Contains(page, "<script>") || strings.Contains(page, "<img src=x") {
			t.Errorf("%s: a hostile value is not escaped", path)
		}
		if !strings.Contains(page, "&lt;script&gt;") {
			t.Errorf("%s: the hostile value is not shown escaped", path)
		}
	}
	resp := post(t, srv, "/dry-run", url.Values{"key": {evil}})
	if strings.Contains(resp.Body, "<script>") {
		t.Error("the dry run page has an unescaped value")
	}
}

func TestListFiltersAndPagesStably(t *testing.T) {
	var ls []letter
	for i := range 130 {
		topic := "orders"
		if i%3 == 0 {
			topic = "invoices"
		}
		ls = append(ls, letter{uuid: fmt.Sprintf("m%03d", i), topic: topic, key: fmt.Sprintf("k%03d", i)})
	}
	srv := serve(t, newArchive(t, ls...), console.WithoutAuth())
	seen := map[string]bool{}
	path := "/list?topic=orders"
	for pages := 0; path != ""; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		code, page := get(t, srv, path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		if strings.Contains(page, ">invoices<") {
			t.Fatalf("%s lists an entry of another topic", path)
		}
		for _, part := range strings.Split(page, `class="entry" href="entry?id=`)[1:] {
			id := part[:strings.Index(part, `"`)]
			if seen[id] {
				t.Fatalf("entry %s on two pages", id)
			}
			seen[id] = true
		}
		path = ""
		if i := strings.Index(page, `id="next" href="`); i >= 0 {
			rest := page[i+len(`id="next" href="`):]
			path = "/" + strings.ReplaceAll(rest[:strings.Index(rest, `"`)], "&amp;", "&")
		}
	}
	if len(seen) != 86 {
		t.Errorf("the pages list %d entries, want the 86 of topic orders", len(seen))
	}
	if _, page := get(t, srv, "/list?topic=orders"); !strings.Contains(page, `id="matching"><b>86</b>`) {
		t.Error("the list does not say how many entries the filter selects")
	}
	if _, page := get(t, srv, "/list?errtype=no.Such"); !strings.Contains(page, `id="matching"><b>0</b>`) {
		t.Error("an error type nothing has matches entries")
	}
	// Key, error text and error type filters.
	if _, page := get(t, srv, "/list?key=k004"); strings.Count(page, `class="entry"`) != 1 {
		t.Error("the key filter does not select one entry")
	}
	if _, page := get(t, srv, "/list?q=k004"); strings.Count(page, `class="entry"`) != 1 {
		t.Error("the search does not find an entry by a part of its key")
	}
	if _, page := get(t, srv, "/list?q=nothing-like-this"); !strings.Contains(page, "No dead letter matches") {
		t.Error("the text filter selects entries it should not")
	}
	if _, page := get(t, srv, "/list?errtype=*errors.errorString"); strings.Count(page, `class="entry"`) != 50 {
		t.Error("the error type filter does not fill a page")
	}
	// A search by key or text is counted on request only: it reads every
	// entry it selects.
	_, page := get(t, srv, "/list?key=k004")
	if strings.Contains(page, `id="matching"><b>`) || !strings.Contains(page, `id="count" href="list?key=k004&amp;count=1"`) {
		t.Error("a key search is counted as the page loads, or offers no count")
	}
	if _, page := get(t, srv, "/list?key=k004&count=1"); !strings.Contains(page, `id="matching"><b>1</b>`) {
		t.Error("count=1 does not count a key search")
	}
}

func TestInvalidFiltersAreRefused(t *testing.T) {
	srv := serve(t, newArchive(t), console.WithoutAuth())
	for _, q := range []string{"reason=bogus", "from=someday", "after=-1", "after=x", "topic=" + url.QueryEscape("a\x00b"), "key=" + strings.Repeat("k", 600)} {
		code, page := get(t, srv, "/list?"+q)
		if code != http.StatusBadRequest || !strings.Contains(page, `id="error"`) {
			t.Errorf("list?%s: status %d, want 400 with the error shown", q, code)
		}
	}
}

func TestStaleIDsAreNotFound(t *testing.T) {
	srv := serve(t, newArchive(t), console.WithoutAuth())
	for _, path := range []string{"/entry?id=gone", "/run?id=gone"} {
		if code, _ := get(t, srv, path); code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", path, code)
		}
	}
	for _, path := range []string{"/entry", "/run?id=" + url.QueryEscape("a\nb"), "/nowhere"} {
		if code, _ := get(t, srv, path); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 400 or 404", path, code)
		}
	}
}

func TestEntryPageShowsPayloadHistoryAndTraceLinks(t *testing.T) {
	big := []byte(strings.Repeat("x", 2<<20))
	ar := newArchive(t,
		letter{uuid: "json", payload: []byte(`{"a":1,"b":[2,3]}`), md: map[string]string{"tenant": "t1"}},
		letter{uuid: "bin", payload: []byte{0, 1, 2, 0xff, 0xfe}},
		letter{uuid: "big", payload: big},
	)
	srv := serve(t, ar, console.WithoutAuth(), console.WithTraceURL("https://jaeger.example/trace/{trace_id}?uiFind={span_id}"))
	_, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("json"))
	for _, want := range []string{
		"{\n  &#34;a&#34;: 1,", "JSON", `<th>tenant</th><td>t1</td>`, `<b>attempt 2</b>`, "worker-1",
		`href="https://jaeger.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?uiFind=00f067aa0ba902b7"`,
		`<th>surely_reason</th><td>exhausted</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the entry page lacks %q", want)
		}
	}
	if _, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("bin")); !strings.Contains(page, "binary (hex)") || !strings.Contains(page, "00 01 02 ff fe") {
		t.Error("a binary payload is not shown as hex")
	}
	_, page = get(t, srv, "/entry?id="+envelope.DeadLetterUUID("big"))
	if !strings.Contains(page, "Cut: the payload is larger") || len(page) > 400<<10 {
		t.Errorf("a 2 MiB payload: page of %d bytes, want it cut", len(page))
	}
}

func TestHiddenPayloadsNeedAClick(t *testing.T) {
	ar := newArchive(t, letter{uuid: "p", payload: []byte("card 4111-1111")})
	srv := serve(t, ar, console.WithoutAuth(), console.WithHiddenPayloads())
	id := envelope.DeadLetterUUID("p")
	if _, page := get(t, srv, "/entry?id="+id); strings.Contains(page, "4111") || !strings.Contains(page, `id="show-payload"`) {
		t.Error("the payload is shown although hidden")
	}
	if _, page := get(t, srv, "/entry?id="+id+"&payload=1"); !strings.Contains(page, "card 4111-1111") {
		t.Error("the payload is not shown on request")
	}
}

func TestRedactorAppliesToPayloadErrorsAndMetadata(t *testing.T) {
	ar := newArchive(t, letter{uuid: "s", payload: []byte("token=s3cret"), err: errors.New("dial s3cret@db"), md: map[string]string{"auth": "s3cret"}})
	srv := serve(t, ar, console.WithoutAuth(), dlq.WithRedactor(func(s string) string { return strings.ReplaceAll(s, "s3cret", "xxxxx") }))
	for _, path := range []string{"/list", "/entry?id=" + envelope.DeadLetterUUID("s")} {
		if _, page := get(t, srv, path); strings.Contains(page, "s3cret") || !strings.Contains(page, "xxxxx") {
			t.Errorf("%s shows an unredacted text", path)
		}
	}
	srv = serve(t, ar, console.WithoutAuth(), dlq.WithRedactor(func(string) string { panic("no") }))
	if _, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("s")); strings.Contains(page, "s3cret") {
		t.Error("a panicking redactor lets the text through")
	}
}

func TestAuthorizationIsRequired(t *testing.T) {
	audit := &syncBuffer{}
	ar := newArchive(t, letter{uuid: "a", retention: 72 * time.Hour})
	srv := serve(t, ar, dlq.WithLogger(jsonLogger(audit)), console.WithPublisher(&recorder{}),
		console.WithAuthorize(func(r *http.Request) (string, bool) {
			u, p, ok := r.BasicAuth()
			return u, ok && u == "alice" && p == "pw"
		}))
	if code, _ := get(t, srv, "/"); code != http.StatusUnauthorized {
		t.Errorf("without credentials: status %d, want 401", code)
	}
	req := request(t, http.MethodGet, srv.URL+"/list", nil)
	req.SetBasicAuth("alice", "pw")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if page := body(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(page, "alice") {
		t.Errorf("with credentials: status %d", resp.StatusCode)
	}
	_ = resp.Body.Close()
	req = request(t, http.MethodPost, srv.URL+"/dry-run", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("alice", "pw")
	resp, err = srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(audit.String(), `"who":"alice"`) {
		t.Errorf("dry run: status %d, audit %q", resp.StatusCode, audit.String())
	}
}

func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	ar := newArchive(t, letter{uuid: "a"})
	for name, opts := range map[string][]dlq.Option{
		"read-only":    {console.WithReadOnly(), console.WithPublisher(&recorder{})},
		"no publisher": nil,
	} {
		srv := serve(t, ar, append(opts, console.WithoutAuth())...)
		for _, path := range []string{"/list", "/entry?id=" + envelope.DeadLetterUUID("a")} {
			if _, page := get(t, srv, path); strings.Contains(page, "dry-run") || strings.Contains(page, `type="checkbox"`) {
				t.Errorf("%s: %s offers an action", name, path)
			}
		}
		for _, path := range []string{"/dry-run", "/replay"} {
			if resp := post(t, srv, path, url.Values{}); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: POST %s: status %d, want 403", name, path, resp.StatusCode)
			}
		}
	}
}

func TestCrossOriginPostsAreRefused(t *testing.T) {
	pub := &recorder{}
	srv := serve(t, newArchive(t, letter{uuid: "a", topic: "orders", retention: 72 * time.Hour}), console.WithoutAuth(), console.WithPublisher(pub))
	form := url.Values{"rate": {"100"}, "confirm": {"yes"}}
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		req := request(t, http.MethodPost, srv.URL+"/replay", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%v: status %d, want 403", hdr, resp.StatusCode)
		}
	}
	if pub.count("orders") != 0 {
		t.Error("a cross-origin POST replayed messages")
	}
}

func TestReplayDryRunThenRun(t *testing.T) {
	audit := &syncBuffer{}
	pub := &recorder{}
	ar := newArchive(t,
		letter{uuid: "ok1", topic: "orders", retention: 72 * time.Hour},
		letter{uuid: "ok2", topic: "orders", retention: 72 * time.Hour},
		letter{uuid: "old", topic: "orders", retention: time.Hour, at: t0.Add(-5 * time.Hour)},
		letter{uuid: "unknown", topic: "orders"},
		letter{uuid: "other", topic: "invoices", retention: 72 * time.Hour},
	)
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(pub), dlq.WithLogger(jsonLogger(audit)))
	resp := post(t, srv, "/dry-run", url.Values{"topic": {"orders"}})
	page := resp.Body
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dry run: %d %s", resp.StatusCode, page)
	}
	for _, want := range []string{"<b>2</b> dead letters would be replayed", "<b>2</b> refused", envelope.DeadLetterUUID("old"), envelope.DeadLetterUUID("unknown"), "retention is unknown"} {
		if !strings.Contains(page, want) {
			t.Errorf("the dry run page lacks %q", want)
		}
	}
	if pub.count("orders") != 0 {
		t.Fatal("the dry run published")
	}
	// Without confirmation, with a bad rate: refused, nothing published.
	for _, form := range []url.Values{
		{"topic": {"orders"}, "rate": {"10"}},
		{"topic": {"orders"}, "rate": {"fast"}, "confirm": {"yes"}},
		{"topic": {"orders"}, "rate": {"10"}, "max": {"-1"}, "confirm": {"yes"}},
	} {
		if resp := post(t, srv, "/replay", form); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400", form, resp.StatusCode)
		}
	}
	resp = post(t, srv, "/replay", url.Values{"topic": {"orders"}, "rate": {"1000"}, "confirm": {"yes"}})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "run?id=") {
		t.Fatalf("replay: status %d, location %q", resp.StatusCode, loc)
	}
	runID := strings.TrimPrefix(loc, "run?id=")
	waitFor(t, "the run to finish", func() bool {
		run, err := ar.LoadReplay(context.Background(), runID)
		return err == nil && string(run.State) == "done"
	})
	if n := pub.count("orders"); n != 2 {
		t.Errorf("the run published %d messages, want 2", n)
	}
	_, page = get(t, srv, "/"+loc)
	if !strings.Contains(page, `id="state">done<`) || !strings.Contains(page, `id="replayed">2<`) || !strings.Contains(page, `id="refused">2<`) {
		t.Errorf("the run page does not show the finished run")
	}
	waitFor(t, "the audit line of the finished run", func() bool { return strings.Contains(audit.String(), "replay finished") })
	log := audit.String()
	for _, want := range []string{`"msg":"console: replay started","who":"unauthenticated","run":"` + runID, `"filter":"topic=orders"`, `"replayed":2`} {
		if !strings.Contains(log, want) {
			t.Errorf("the audit log lacks %q: %s", want, log)
		}
	}
}

func TestReplaySelectedEntriesAndErrorType(t *testing.T) {
	pub := &recorder{}
	ar := newArchive(t,
		letter{uuid: "a", topic: "orders", retention: 72 * time.Hour},
		letter{uuid: "b", topic: "orders", retention: 72 * time.Hour, err: context.DeadlineExceeded},
		letter{uuid: "c", topic: "orders", retention: 72 * time.Hour},
	)
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(pub))
	if _, page := get(t, srv, "/list?topic=orders"); !strings.Contains(page, "Replay or discard all 3 matching this filter") {
		t.Error("the list does not offer all 3 matching entries")
	}
	page := post(t, srv, "/dry-run", url.Values{"scope": {"selected"}, "id": {envelope.DeadLetterUUID("a"), envelope.DeadLetterUUID("c")}}).Body
	if !strings.Contains(page, "<b>2</b> dead letters would be replayed") {
		t.Error("a selection of two is not two")
	}
	if resp := post(t, srv, "/dry-run", url.Values{"scope": {"selected"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an empty selection: status %d, want 400", resp.StatusCode)
	}
	page = post(t, srv, "/dry-run", url.Values{"errtype": {"*errors.errorString"}}).Body
	if !strings.Contains(page, "<b>2</b> dead letters would be replayed") {
		t.Error("the error type selection is not two")
	}
	page = post(t, srv, "/dry-run", url.Values{"errtype": {"no.Such"}}).Body
	if !strings.Contains(page, "<b>0</b> dead letters would be replayed") {
		t.Error("an error type nothing has selects something")
	}
}

func TestMountedUnderAPrefix(t *testing.T) {
	h, err := console.New(newArchive(t, letter{uuid: "a"}), console.WithoutAuth())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/dlq/", http.StripPrefix("/ops/dlq", h))
	mux.Handle("/ops/dlq", http.StripPrefix("/ops/dlq", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := *srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(request(t, http.MethodGet, srv.URL+"/ops/dlq", nil))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusMovedPermanently || loc != "dlq/" {
		t.Errorf("the mount point without slash: %d to %q, want a redirect to dlq/", resp.StatusCode, loc)
	}
	for _, path := range []string{"/ops/dlq/", "/ops/dlq/list", "/ops/dlq/static/style.css"} {
		resp, err := srv.Client().Do(request(t, http.MethodGet, srv.URL+path, nil))
		if err != nil {
			t.Fatal(err)
		}
		page := body(t, resp)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", path, resp.StatusCode)
		}
		if strings.Contains(page, `href="/`) {
			t.Errorf("%s has an absolute link", path)
		}
	}
}
