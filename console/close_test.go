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
	"github.com/surely-dev/surely/dlq/archive"
)

// Close stops the runs the console started and waits for their final
// save: a run is saved interrupted, not left running, and resumes; a
// second Close is harmless; a closed console starts no run.
func TestCloseInterruptsTheRunsItStarted(t *testing.T) {
	ctx := context.Background()
	var ls []letter
	for _, id := range []string{"c1", "c2", "c3"} {
		ls = append(ls, letter{uuid: id, topic: "orders", retention: 72 * time.Hour})
	}
	ar := newArchive(t, ls...)
	rec := &recorder{}
	c, srv := serveConsole(t, ar, console.WithoutAuth(), console.WithPublisher(rec))
	// One message every 1000 s: the first is published at once, the
	// second waits for the rate limiter.
	resp := post(t, srv, "/replay", url.Values{"rate": {"0.001"}, "confirm": {"yes"}})
	id := strings.TrimPrefix(resp.Header.Get("Location"), "run?id=")
	if resp.StatusCode != http.StatusSeeOther || id == "" {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Body)
	}
	waitFor(t, "the first publish", func() bool { return rec.count("orders") == 1 })

	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	run, err := ar.LoadReplay(ctx, id)
	if err != nil || run.State != archive.RunInterrupted || run.Replayed != 1 {
		t.Fatalf("after Close: %s, %d replayed (%v); want interrupted after 1", run.State, run.Replayed, err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if resp := post(t, srv, "/replay", url.Values{"rate": {"1000"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a replay after Close: %d, want 503", resp.StatusCode)
	}
	if resp := post(t, srv, "/resume", url.Values{"id": {id}, "rate": {"1000"}}); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a resume after Close: %d, want 503", resp.StatusCode)
	}
	if rec.count("orders") != 1 {
		t.Errorf("%d published after Close, want 1", rec.count("orders"))
	}
	if _, page := get(t, srv, "/run?id="+id); !strings.Contains(page, `id="state">interrupted<`) || !strings.Contains(page, `id="resume"`) {
		t.Error("the page of the closed console's run does not show it interrupted with a resume")
	}

	// The next console resumes it.
	next, nextSrv := serveConsole(t, ar, console.WithoutAuth(), console.WithPublisher(rec))
	if resp := post(t, nextSrv, "/resume", url.Values{"id": {id}, "rate": {"1000"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d %s", resp.StatusCode, resp.Body)
	}
	waitFor(t, "the resumed run to finish", func() bool {
		run, err := ar.LoadReplay(ctx, id)
		return err == nil && run.State == archive.RunDone
	})
	if rec.count("orders") != 3 {
		t.Errorf("%d published in all, want 3", rec.count("orders"))
	}
	if err := next.Close(ctx); err != nil {
		t.Errorf("Close of a console whose run is done: %v", err)
	}
}

// blocked is a publisher whose publishes wait until open is closed;
// entered receives one value per publish that started.
type blocked struct {
	recorder
	entered chan struct{}
	open    chan struct{}
}

func (b *blocked) Publish(topic string, msgs ...*message.Message) error {
	b.entered <- struct{}{}
	<-b.open
	return b.recorder.Publish(topic, msgs...)
}

// A publish under way cannot be interrupted (Watermill's Publish takes no
// context): Close returns ctx's error when ctx ends first, and the run
// still saves itself interrupted once the publish returns; a Close then
// waits for that.
func TestCloseReturnsWhenItsContextEnds(t *testing.T) {
	ar := newArchive(t, letter{uuid: "b1", topic: "orders", retention: 72 * time.Hour},
		letter{uuid: "b2", topic: "orders", retention: 72 * time.Hour})
	pub := &blocked{entered: make(chan struct{}, 10), open: make(chan struct{})}
	c, srv := serveConsole(t, ar, console.WithoutAuth(), console.WithPublisher(pub))
	// The page waits a moment for the run's first decision, then shows
	// the run (its first publish is blocked).
	resp := post(t, srv, "/replay", url.Values{"rate": {"1000"}, "confirm": {"yes"}})
	<-pub.entered
	id := strings.TrimPrefix(resp.Header.Get("Location"), "run?id=")
	if resp.StatusCode != http.StatusSeeOther || id == "" {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Body)
	}

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Close(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with an ended context while a publish is under way: %v, want context.Canceled", err)
	}
	close(pub.open)
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("Close once the publish returned: %v", err)
	}
	run, err := ar.LoadReplay(context.Background(), id)
	if err != nil || run.State != archive.RunInterrupted || run.Replayed != 1 {
		t.Errorf("after Close: %s, %d replayed (%v); want interrupted after the publish under way", run.State, run.Replayed, err)
	}
	if n := pub.count("orders"); n != 1 {
		t.Errorf("%d published, want 1", n)
	}
}
