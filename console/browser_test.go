package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// chromium is where Debian's package installs the browser.
const chromium = "/usr/bin/chromium"

// browser returns a chromedp context on a headless Chromium, bounded in
// time; without Chromium the test skips, or fails under
// SURELY_REQUIRE_SERVICES=1.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium
	if _, err := os.Stat(path); err != nil {
		if p, err := exec.LookPath("chromium"); err == nil {
			path = p
		} else {
			if os.Getenv("SURELY_REQUIRE_SERVICES") == "1" {
				t.Fatalf("no Chromium at %s or on PATH (apt-get install -y chromium), and SURELY_REQUIRE_SERVICES=1", chromium)
			}
			t.Skipf("no Chromium at %s or on PATH: apt-get install -y chromium", chromium)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	return bctx
}

// screenshot saves the page as dir/name.png: dir is
// SURELY_CONSOLE_SCREENSHOTS (the README's are docs/console), or a
// temporary directory.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitText polls the text of sel until it contains want (the run page
// refreshes itself while the run is running).
func waitText(t *testing.T, ctx context.Context, sel, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err == nil && strings.Contains(txt, want) {
			return txt
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q after 30s (%v), want %q", sel, txt, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outage is a realistic archive: dead letters of three handlers over the
// last day, of several error types.
func outage() []letter {
	var ls []letter
	for i := range 36 {
		l := letter{
			uuid: fmt.Sprintf("0190b5d2-7c4e-7a10-8000-%012d", i), topic: "orders", handler: "charge-payments",
			key: fmt.Sprintf("order-%d", 1001+i), retention: 72 * time.Hour,
			payload: []byte(fmt.Sprintf(`{"order":%d,"amount":"%d.90 EUR","card":"visa-4242"}`, 1001+i, 10+i)),
			md:      map[string]string{"content-type": "application/json"},
			at:      t0.Add(-time.Duration(i*37) * time.Minute),
			err:     fmt.Errorf("charge order-%d: %w", 1001+i, &gatewayError{}),
		}
		switch {
		case i%4 == 1:
			l.topic, l.handler, l.err = "invoices", "send-invoice", fmt.Errorf("render invoice: %w", context.DeadlineExceeded)
		case i%9 == 2:
			l.reason, l.err = dlq.ReasonPermanent, errors.New("card declined (do_not_honor) <script>alert(1)</script>")
		case i%7 == 3:
			l.topic, l.handler, l.reason = "shipments", "book-courier", dlq.ReasonConflict
		case i%10 == 6:
			l.retention = 0 // unknown: the retention guard refuses it
		}
		ls = append(ls, l)
	}
	return ls
}

type gatewayError struct{}

func (*gatewayError) Error() string { return "dial tcp 10.20.0.7:443: connect: connection refused" }

// TestBrowser drives the console in Chromium: the overview, a filter, an
// entry with its timeline, a dry run and a replay to its end.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	dir := os.Getenv("SURELY_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	pub := &recorder{}
	ar := newArchive(t, outage()...)
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	for attempt := range 2 {
		cr, err := store.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: "order-1001", Lease: time.Minute, MaxAttempts: 2,
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: fmt.Sprintf("00f067aa0ba902b%d", attempt)})
		if err != nil || cr.Status != idempotency.Acquired {
			t.Fatalf("claim: %v %v", cr.Status, err)
		}
		if err := store.Release(t.Context(), cr.Lease, idempotency.Failure{Error: (&gatewayError{}).Error(), ErrorType: "*main.gatewayError", Reason: "error"}); err != nil {
			t.Fatal(err)
		}
	}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(pub), replay.WithStore(store),
		console.WithTraceURL("http://localhost:16686/trace/{trace_id}?uiFind={span_id}"))

	// Overview.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("img.chart"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#total", "36")
	screenshot(t, ctx, dir, "overview")

	// Filter: the list of one topic, from the overview's link.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="list?topic=invoices"]`)), chromedp.WaitVisible(chromedp.CSS("#entries"))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`input[name="q"]`), "render"), chromedp.Click(chromedp.CSS("#apply")),
		chromedp.WaitVisible(chromedp.CSS(`input[name="q"][value="render"]`))); err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#entries a.entry")))
	if err != nil || len(rows) != 9 {
		t.Fatalf("the invoices filter lists %d entries (%v), want 9", len(rows), err)
	}
	screenshot(t, ctx, dir, "list")

	// An entry and its timeline.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#entries a.entry")), chromedp.WaitVisible(chromedp.CSS("#timeline"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#timeline", "attempt 2")
	screenshot(t, ctx, dir, "entry")

	// Dry run of every orders entry, then the replay at a rate.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/list?topic=orders"), chromedp.WaitVisible(chromedp.CSS("#replay-all")),
		chromedp.Click(chromedp.CSS("#replay-all")), chromedp.WaitVisible(chromedp.CSS("#run-form"))); err != nil {
		t.Fatal(err)
	}
	would := waitText(t, ctx, "#would", "would be replayed")
	screenshot(t, ctx, dir, "dry-run")
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#rate"), "20"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS("#state"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#state", "done")
	replayed := waitText(t, ctx, "#replayed", "")
	if !strings.HasPrefix(would, replayed+" ") || pub.count("orders") == 0 {
		t.Errorf("the dry run said %q, the run replayed %s (published %d)", would, replayed, pub.count("orders"))
	}
	screenshot(t, ctx, dir, "run")

	// Discard the shipments' dead letters, with a reason.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/list?topic=shipments"), chromedp.Click(chromedp.CSS("#replay-all")),
		chromedp.WaitVisible(chromedp.CSS("#discard-form")), chromedp.SetValue(chromedp.CSS("#why"), "courier API test data"),
		chromedp.Click(chromedp.CSS("#confirm-discard")), chromedp.Click(chromedp.CSS("#discard")),
		chromedp.WaitVisible(chromedp.CSS("#entries"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#entries", "discarded")
	if rows, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#entries a.entry"))); err != nil || len(rows) != 4 {
		t.Errorf("the discarded list has %d entries (%v), want the 4 shipments", len(rows), err)
	}

	// The operation page: the record and the redelivery chain.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/operation?ns=ns&key=order-1001"), chromedp.WaitVisible(chromedp.CSS("#chain"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#chain", "replayed")
	screenshot(t, ctx, dir, "operation")

	// A form on another origin that posts a replay to the console: the
	// browser marks it cross-site, the console refuses it.
	before := pub.count("orders")
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprintf(w, `<form method="post" action="%s/replay"><input type="hidden" name="rate" value="1000">`+
			`<input type="hidden" name="confirm" value="yes"><button id="go" type="submit">win a prize</button></form>`, srv.URL)
	}))
	defer evil.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL), chromedp.Click(chromedp.CSS("#go")),
		chromedp.WaitVisible(chromedp.CSS("body"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "body", "cross-origin request detected")
	if n := pub.count("orders"); n != before {
		t.Errorf("a cross-origin form replayed %d messages", n-before)
	}
}
