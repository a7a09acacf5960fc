package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/envelope"
)

// A run another process runs (replay.Run here, not started by the
// console) is canceled from its page: the console saves it canceled in
// the archive, the run stops before its next publish, and the console
// resumes it.
func TestCancelARunStartedElsewhere(t *testing.T) {
	ctx := context.Background()
	var ls []letter
	for _, id := range []string{"e1", "e2", "e3"} {
		ls = append(ls, letter{uuid: id, topic: "orders", retention: 72 * time.Hour})
	}
	ar := newArchive(t, ls...)
	audit := &syncBuffer{}
	// One clock for the console and the other process's run: the letters'
	// retention is measured from t0, whatever the date the test runs on.
	clk := &movingClock{}
	clk.Start()
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}), withAudit(audit), dlq.WithClock(clk.Now))

	// The other process: its first publish waits until the cancel is saved.
	other := &gate{open: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := replay.Run(ctx, ar, other, archive.Filter{}, replay.WithID("elsewhere"), dlq.WithClock(clk.Now))
		done <- err
	}()
	waitFor(t, "the other process's run to be saved", func() bool {
		run, err := ar.LoadReplay(ctx, "elsewhere")
		return err == nil && run.State == archive.RunRunning
	})
	_, page := get(t, srv, "/run?id=elsewhere")
	if !strings.Contains(page, `id="cancel"`) || !strings.Contains(page, "another process") || strings.Contains(page, `id="resume"`) {
		t.Fatal("the page of a run running elsewhere offers no cancel, or offers a resume")
	}
	if resp := post(t, srv, "/cancel", url.Values{"id": {"elsewhere"}}); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "run?id=elsewhere" {
		t.Fatalf("cancel: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	close(other.open)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the other process's run: %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other process's run did not stop")
	}
	run, err := ar.LoadReplay(ctx, "elsewhere")
	if err != nil || run.State != archive.RunCanceled || run.Replayed != 1 {
		t.Fatalf("after the cancel: %s, %d replayed (%v), want canceled after the publish under way", run.State, run.Replayed, err)
	}
	if !strings.Contains(audit.String(), `"msg":"console: replay canceled","who":"unauthenticated","run":"elsewhere","was":"running","running_here":false`) {
		t.Errorf("the audit log lacks the cancel: %s", audit.String())
	}
	_, page = get(t, srv, "/run?id=elsewhere")
	if !strings.Contains(page, `id="state">canceled<`) || !strings.Contains(page, `id="resume"`) || strings.Contains(page, `id="cancel"`) {
		t.Fatal("the page of a canceled run offers no resume, or still a cancel")
	}
	if resp := post(t, srv, "/resume", url.Values{"id": {"elsewhere"}, "rate": {"1000"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	waitFor(t, "the resumed run to finish", func() bool {
		run, err := ar.LoadReplay(ctx, "elsewhere")
		return err == nil && run.State == archive.RunDone
	})
}

// A run whose process died still reads "running": the cancel marks it
// canceled, so it can be resumed.
func TestCancelAStaleRunningRun(t *testing.T) {
	ctx := context.Background()
	ar := newArchive(t, letter{uuid: "s1", topic: "orders", retention: 72 * time.Hour})
	if err := ar.SaveReplay(ctx, archive.ReplayRun{ID: "dead", State: archive.RunRunning, Started: t0.Add(-time.Hour), Updated: t0.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}))
	if resp := post(t, srv, "/cancel", url.Values{"id": {"dead"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
	run, err := ar.LoadReplay(ctx, "dead")
	if err != nil || run.State != archive.RunCanceled || !run.Updated.Equal(t0) {
		t.Errorf("after the cancel: %s updated %v (%v), want canceled at the console's now", run.State, run.Updated, err)
	}
}

// A run that is done cannot be canceled; an unknown run is not found; an
// invalid ID is a bad request; a cross-origin cancel is refused.
func TestCancelIsRefused(t *testing.T) {
	ctx := context.Background()
	ar := newArchive(t)
	if err := ar.SaveReplay(ctx, archive.ReplayRun{ID: "finished", State: archive.RunDone, Started: t0, Updated: t0}); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}))
	resp := post(t, srv, "/cancel", url.Values{"id": {"finished"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(resp.Body, "replay run finished is done") || !strings.Contains(resp.Body, "nothing to cancel") {
		t.Errorf("cancel of a done run: %d %s, want 409 saying it is done", resp.StatusCode, resp.Body)
	}
	if run, _ := ar.LoadReplay(ctx, "finished"); run.State != archive.RunDone {
		t.Errorf("a done run became %s", run.State)
	}
	if _, page := get(t, srv, "/run?id=finished"); strings.Contains(page, `id="cancel"`) {
		t.Error("the page of a done run offers a cancel")
	}
	if resp := post(t, srv, "/cancel", url.Values{"id": {"no-such-run"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("cancel of an unknown run: %d, want 404", resp.StatusCode)
	}
	for _, id := range []string{"", "a\nb"} {
		if resp := post(t, srv, "/cancel", url.Values{"id": {id}}); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("cancel of run %q: %d, want 400", id, resp.StatusCode)
		}
	}
	req := request(t, http.MethodPost, srv.URL+"/cancel", strings.NewReader("id=finished"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	cross, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = cross.Body.Close()
	if cross.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-origin cancel: %d, want 403", cross.StatusCode)
	}
}

// The console's clock is the clock of the replays it starts: the
// retention guard decides by it, and the run is stamped with it.
func TestReplaysReadTheConsolesClock(t *testing.T) {
	ctx := context.Background()
	then := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	// An hour old by the console's clock, with a retention of two hours:
	// within it. By the wall clock it expired long ago.
	ar := newArchive(t, letter{uuid: "c1", topic: "orders", at: then.Add(-time.Hour), retention: 2 * time.Hour})
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}), dlq.WithClock(func() time.Time { return then }))
	if page := post(t, srv, "/dry-run", url.Values{}).Body; !strings.Contains(page, "<b>1</b> dead letters would be replayed") {
		t.Fatal("the retention guard of the dry run does not read the console's clock")
	}
	resp := post(t, srv, "/replay", url.Values{"rate": {"1000"}, "confirm": {"yes"}})
	id := strings.TrimPrefix(resp.Header.Get("Location"), "run?id=")
	if resp.StatusCode != http.StatusSeeOther || id == "" {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Body)
	}
	waitFor(t, "the run to finish", func() bool {
		run, err := ar.LoadReplay(ctx, id)
		return err == nil && run.State == archive.RunDone
	})
	run, _ := ar.LoadReplay(ctx, id)
	if run.Replayed != 1 || !run.Started.Equal(then) || !run.Updated.Equal(then) {
		t.Errorf("the run: %d replayed, started %v, updated %v; want 1 at the console's %v", run.Replayed, run.Started, run.Updated, then)
	}
}

// With a dedup store the run's page checks the outcomes of a stopped run
// (replay.Reconcile): the entries whose operation completed since are
// resolved, the others pending.
func TestCheckOutcomes(t *testing.T) {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	// The records the failed attempts left: the retention guard reads them.
	claim := func(key string) idempotency.ClaimResult {
		t.Helper()
		cr, err := store.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: fingerprint("o1", nil), Lease: time.Minute, MaxAttempts: 9})
		if err != nil || cr.Status != idempotency.Acquired {
			t.Fatalf("claim %s: %v %v", key, cr.Status, err)
		}
		return cr
	}
	for _, key := range []string{"k1", "k2"} {
		if err := store.Release(ctx, claim(key).Lease, idempotency.Failure{Error: "boom", Reason: "error"}); err != nil {
			t.Fatal(err)
		}
	}
	ar := newArchive(t, letter{uuid: "o1", topic: "orders", key: "k1", retention: 72 * time.Hour},
		letter{uuid: "o2", topic: "orders", key: "k2", retention: 72 * time.Hour})
	audit := &syncBuffer{}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}), replay.WithStore(store), withAudit(audit))
	resp := post(t, srv, "/replay", url.Values{"rate": {"1000"}, "confirm": {"yes"}})
	id := strings.TrimPrefix(resp.Header.Get("Location"), "run?id=")
	if resp.StatusCode != http.StatusSeeOther || id == "" {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Body)
	}
	waitFor(t, "the run to finish", func() bool {
		_, page := get(t, srv, "/run?id="+id)
		return strings.Contains(page, `id="state">done<`) && strings.Contains(page, `id="reconcile"`)
	})
	// The consumer completes k1's operation after the run.
	if err := store.Complete(ctx, claim("k1").Lease, idempotency.Outcome{}); err != nil {
		t.Fatal(err)
	}
	resp = post(t, srv, "/reconcile", url.Values{"id": {id}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Body, `id="checked-resolved">1<`) || !strings.Contains(resp.Body, `id="checked-pending">1<`) ||
		!strings.Contains(resp.Body, `id="resolved">1<`) {
		t.Fatalf("check outcomes: %d %s", resp.StatusCode, resp.Body)
	}
	if !strings.Contains(audit.String(), `"msg":"console: replay outcomes checked","who":"unauthenticated","run":"`+id+`","resolved":1,"pending":1,"failed_again":0`) {
		t.Errorf("the audit log lacks the check: %s", audit.String())
	}
	if _, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("o1")); !strings.Contains(page, `id="entry-state">resolved<`) {
		t.Error("the entry page of a resolved entry does not say resolved")
	}
	if _, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("o2")); !strings.Contains(page, `id="entry-state">replayed<`) {
		t.Error("the entry page of a pending entry does not say replayed")
	}
	if _, page := get(t, srv, "/list?state=resolved"); strings.Count(page, `class="entry"`) != 1 {
		t.Error("state=resolved does not list the resolved entry")
	}

	if resp := post(t, srv, "/reconcile", url.Values{"id": {"no-such-run"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("check of an unknown run: %d, want 404", resp.StatusCode)
	}
	if err := ar.SaveReplay(ctx, archive.ReplayRun{ID: "live", State: archive.RunRunning, Started: t0, Updated: t0}); err != nil {
		t.Fatal(err)
	}
	if resp := post(t, srv, "/reconcile", url.Values{"id": {"live"}}); resp.StatusCode != http.StatusConflict || !strings.Contains(resp.Body, "is running") {
		t.Errorf("check of a running run: %d, want 409", resp.StatusCode)
	}
	// Without a store: no check.
	plain := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}))
	if _, page := get(t, plain, "/run?id="+id); strings.Contains(page, `id="reconcile"`) {
		t.Error("a console without a store offers to check outcomes")
	}
	if resp := post(t, plain, "/reconcile", url.Values{"id": {id}}); resp.StatusCode != http.StatusConflict {
		t.Errorf("check without a store: %d, want 409", resp.StatusCode)
	}
}
