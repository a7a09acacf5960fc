package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/envelope"
)

func TestOperationPageShowsTheRecordAndTheChain(t *testing.T) {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	cr, err := store.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: "order-7", Lease: time.Minute, MaxAttempts: 3, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"})
	if err != nil || cr.Status != idempotency.Acquired {
		t.Fatalf("claim: %v %v", cr.Status, err)
	}
	ar := newArchive(t, letter{uuid: "o7", key: "order-7", topic: "orders"}, letter{uuid: "o8", key: "order-8"})
	srv := serve(t, ar, console.WithoutAuth(), replay.WithStore(store))
	code, page := get(t, srv, "/operation?ns=ns&key=order-7")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{`id="record-state">in_progress<`, "<b>attempt 1</b>", "4bf92f3577b34da6a3ce929d0e0e4736", `href="entry?id=` + envelope.DeadLetterUUID("o7")} {
		if !strings.Contains(page, want) {
			t.Errorf("the operation page lacks %q", want)
		}
	}
	if strings.Contains(page, envelope.DeadLetterUUID("o8")) {
		t.Error("the operation page lists another operation's dead letter")
	}
	if _, page := get(t, srv, "/operation?ns=ns&key=never"); !strings.Contains(page, `id="record-missing"`) {
		t.Error("a missing record is not said so")
	}
	if _, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("o7")); !strings.Contains(page, `href="operation?ns=ns&amp;key=order-7"`) {
		t.Error("the entry page does not link to its operation")
	}
	if code, _ := get(t, srv, "/operation?ns=ns"); code != http.StatusBadRequest {
		t.Errorf("no key: status %d, want 400", code)
	}
	// Without a store: the dead letters only.
	srv = serve(t, ar, console.WithoutAuth())
	if _, page := get(t, srv, "/operation?ns=ns&key=order-7"); !strings.Contains(page, "has no dedup store") || !strings.Contains(page, envelope.DeadLetterUUID("o7")) {
		t.Error("without a store the page does not show the dead letters and say why the record is missing")
	}
}

// gate is a publisher that blocks every publish until released.
type gate struct {
	recorder
	open chan struct{}
}

func (g *gate) Publish(topic string, msgs ...*message.Message) error {
	<-g.open
	return g.recorder.Publish(topic, msgs...)
}

func TestCancelAndResumeARun(t *testing.T) {
	ctx := context.Background()
	var ls []letter
	for _, id := range []string{"r1", "r2", "r3"} {
		ls = append(ls, letter{uuid: id, topic: "orders", retention: 72 * time.Hour})
	}
	ar := newArchive(t, ls...)
	pub := &gate{open: make(chan struct{})}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(pub))
	resp := post(t, srv, "/replay", url.Values{"topic": {"orders"}, "rate": {"1000"}, "confirm": {"yes"}})
	runID := strings.TrimPrefix(resp.Header.Get("Location"), "run?id=")
	if resp.StatusCode != http.StatusSeeOther || runID == "" {
		t.Fatalf("replay: %d", resp.StatusCode)
	}
	// The first publish is blocked: the run is running in this console.
	if _, page := get(t, srv, "/run?id="+runID); !strings.Contains(page, `id="cancel"`) || !strings.Contains(page, `http-equiv="refresh"`) {
		t.Fatal("a running run offers no cancel, or its page does not refresh")
	}
	if resp := post(t, srv, "/cancel", url.Values{"id": {runID}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
	close(pub.open)
	waitFor(t, "the run to stop", func() bool {
		run, err := ar.LoadReplay(ctx, runID)
		return err == nil && run.State == archive.RunCanceled
	})
	// A second cancel leaves it canceled.
	if resp := post(t, srv, "/cancel", url.Values{"id": {runID}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("cancel of a canceled run: %d, want 303", resp.StatusCode)
	}
	if run, _ := ar.LoadReplay(ctx, runID); run.State != archive.RunCanceled {
		t.Errorf("a canceled run canceled again is %s", run.State)
	}
	waitFor(t, "the resume button", func() bool {
		_, page := get(t, srv, "/run?id="+runID)
		return strings.Contains(page, `id="resume"`)
	})
	if resp := post(t, srv, "/resume", url.Values{"id": {"no-such-run"}, "rate": {"10"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("resume of a stale run ID: %d, want 404", resp.StatusCode)
	}
	if resp := post(t, srv, "/resume", url.Values{"id": {runID}, "rate": {"x"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("resume with a bad rate: %d, want 400", resp.StatusCode)
	}
	if resp := post(t, srv, "/resume", url.Values{"id": {runID}, "rate": {"1000"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	waitFor(t, "the resumed run to finish", func() bool {
		run, err := ar.LoadReplay(ctx, runID)
		return err == nil && string(run.State) == "done"
	})
	if n := pub.count("orders"); n != 3 {
		t.Errorf("published %d, want each of the 3 entries once", n)
	}
	if _, page := get(t, srv, "/run?id="+runID); !strings.Contains(page, `id="remaining">0<`) || strings.Contains(page, `id="resume"`) ||
		strings.Contains(page, `id="cancel"`) {
		t.Error("a finished run shows entries remaining, or offers a resume or a cancel")
	}
}

func TestReplayOptionsGoToEveryReplay(t *testing.T) {
	for _, o := range []dlq.Option{replay.WithRate(3), replay.WithMax(1), replay.WithDryRun(), replay.WithID("x")} {
		if _, err := console.New(newArchive(t), console.WithoutAuth(), o); !errors.Is(err, dlq.ErrInvalidOption) {
			t.Errorf("a replay option the console sets itself, given to New: %v, want ErrInvalidOption", err)
		}
	}
	// An entry without a retention in its envelope is refused, unless
	// the console was given a default retention.
	ar := newArchive(t, letter{uuid: "u", topic: "orders"})
	page := post(t, serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{})), "/dry-run", url.Values{}).Body
	if !strings.Contains(page, "<b>0</b> dead letters would be replayed") {
		t.Fatal("an entry of unknown retention is not refused")
	}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}), replay.WithDefaultRetention(72*time.Hour), replay.WithConcurrency(2))
	if page := post(t, srv, "/dry-run", url.Values{}).Body; !strings.Contains(page, "<b>1</b> dead letters would be replayed") {
		t.Error("replay.WithDefaultRetention given to New does not reach the replay")
	}
}
