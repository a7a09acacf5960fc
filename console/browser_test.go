package console_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/chromedp/chromedp"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/handler"
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
// SURELY_CONSOLE_SCREENSHOTS (docs/CONSOLE.md's are docs/console), or a
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
			md:      map[string]string{"content-type": "application/json", idempotency.DefaultMetadataKey: fmt.Sprintf("order-%d", 1001+i)},
			at:      t0.Add(-time.Duration(i*37) * time.Minute),
			err:     fmt.Errorf("charge order-%d: %w", 1001+i, dialGateway()),
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

// gatewayError carries the stack where it was made (as errors of
// github.com/pkg/errors and the like do): the dead letter's call site.
type gatewayError struct{ pcs []uintptr }

func (*gatewayError) Error() string { return "dial tcp 10.20.0.7:443: connect: connection refused" }

func (e *gatewayError) Callers() []uintptr { return e.pcs }

// dialGateway fails as a payment gateway's client would.
func dialGateway() error {
	pcs := make([]uintptr, 16)
	return &gatewayError{pcs: pcs[:runtime.Callers(1, pcs)]}
}

// failedAttempts leaves in store the record the attempts of the orders
// that were dead-lettered left behind: two failed attempts of a budget of
// two (exhausted). The entries of unknown retention get none: their
// record expired, and the retention guard refuses them. It returns the
// operation keys of the records.
func failedAttempts(t *testing.T, store idempotency.Store, ls []letter) []string {
	t.Helper()
	ex, err := idempotency.NewExtractor()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, l := range ls {
		if l.topic != "orders" || l.retention == 0 {
			continue
		}
		op, err := ex.Extract(message.NewMessage(l.uuid, l.payload))
		if err != nil {
			t.Fatal(err)
		}
		for attempt := range 2 {
			cr, err := store.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: l.key, Fingerprint: op.Fingerprint,
				Lease: time.Minute, MaxAttempts: 2,
				TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: fmt.Sprintf("00f067aa0ba902b%d", attempt)})
			if err != nil || cr.Status != idempotency.Acquired {
				t.Fatalf("claim %s: %v %v", l.key, cr.Status, err)
			}
			if err := store.Release(t.Context(), cr.Lease, idempotency.Failure{Error: l.err.Error(), ErrorType: "*main.gatewayError", Reason: "error"}); err != nil {
				t.Fatal(err)
			}
		}
		keys = append(keys, l.key)
	}
	return keys
}

// consumer runs the orders' consumer on pubSub: a surely handler
// (handler.New) over store, whose business step succeeds now that the
// gateway is back. It returns how many messages the business step
// handled.
func consumer(t *testing.T, store idempotency.Store, ar archive.Archive, pubSub *gochannel.GoChannel) *atomic.Int64 {
	t.Helper()
	handled := &atomic.Int64{}
	h, err := handler.New(func(*message.Message) ([]*message.Message, error) {
		handled.Add(1)
		return nil, nil
	}, handler.WithStore(store, "ns"), handler.WithDeadLetter(ar, "dlq"), handler.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddConsumerHandler("charge-payments", "orders", pubSub, handler.NoPublish(h))
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		if err := router.Close(); err != nil {
			t.Error(err)
		}
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-router.Running():
	case <-time.After(10 * time.Second):
		t.Fatal("the router did not start")
	}
	return handled
}

// TestBrowser drives the console in Chromium: the overview, a filter, an
// entry with its timeline, a dry run and a replay to its end, consumed
// by a surely handler over the same store until the entries are
// resolved, a discard, and a cross-origin form.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	dir := os.Getenv("SURELY_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	letters := outage()
	ar := newArchive(t, letters...)
	// The console and the store share a clock, which moves from the
	// replay on.
	clk := &movingClock{}
	store, err := memstore.New(idempotency.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	keys := failedAttempts(t, store, letters)
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	handled := consumer(t, store, ar, pubSub)
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(pubSub), replay.WithStore(store),
		console.WithTraceURL("http://localhost:16686/trace/{trace_id}?uiFind={span_id}"), dlq.WithClock(clk.Now))

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
	clk.Start()
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#rate"), "20"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS("#state"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#state", "done")
	replayed := waitText(t, ctx, "#replayed", "")
	if !strings.HasPrefix(would, replayed+" ") || replayed != strconv.Itoa(len(keys)) {
		t.Errorf("the dry run said %q, the run replayed %s, want the %d entries with a record", would, replayed, len(keys))
	}
	screenshot(t, ctx, dir, "run")

	// The consumer completes every replayed operation; the run resolved
	// those it saw done, "Check outcomes" the others.
	waitFor(t, "the consumer to complete every replayed operation", func() bool {
		for _, k := range keys {
			if rec, err := store.Get(t.Context(), "ns", k); err != nil || rec.State != idempotency.StateDone {
				return false
			}
		}
		return true
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#reconcile")), chromedp.WaitVisible(chromedp.CSS("#checked"))); err != nil {
		t.Fatal(err)
	}
	if pending := waitText(t, ctx, "#checked-pending", ""); pending != "0" {
		t.Errorf("after the consumer completed every operation, %s are pending", pending)
	}
	if resolved := waitText(t, ctx, "#resolved", ""); resolved != replayed {
		t.Errorf("the run resolved %s of the %s it replayed", resolved, replayed)
	}
	if n := handled.Load(); n != int64(len(keys)) {
		t.Errorf("the consumer handled %d messages, want %d", n, len(keys))
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#resolved-link")), chromedp.WaitVisible(chromedp.CSS("#entries"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#entries", "resolved")
	rows, err = chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#entries a.entry")))
	if err != nil || strconv.Itoa(len(rows)) != replayed {
		t.Errorf("the resolved list has %d entries (%v), want the %s replayed", len(rows), err, replayed)
	}
	if txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#entries tbody"))); err != nil || strings.Count(txt, "resolved") != len(rows) {
		t.Errorf("the resolved list's rows: %q (%v)", txt, err)
	}
	screenshot(t, ctx, dir, "resolved")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#entries a.entry")), chromedp.WaitVisible(chromedp.CSS("#entry-state"))); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "#entry-state", "resolved")

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
	runsBefore, err := ar.ListReplays(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before := handled.Load()
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
	if runs, err := ar.ListReplays(t.Context()); err != nil || len(runs) != len(runsBefore) || handled.Load() != before {
		t.Errorf("a cross-origin form started a run (%d runs, were %d; %v) or replayed messages (%d)", len(runs), len(runsBefore), err, handled.Load()-before)
	}
}
