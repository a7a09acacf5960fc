package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/envelope"
)

func TestDiscardWithAReasonAndAConfirmation(t *testing.T) {
	ctx := context.Background()
	audit := &syncBuffer{}
	ar := newArchive(t,
		letter{uuid: "d1", topic: "orders"}, letter{uuid: "d2", topic: "orders"}, letter{uuid: "keep", topic: "invoices"},
	)
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}), withAudit(audit))
	page := post(t, srv, "/dry-run", url.Values{"topic": {"orders"}}).Body
	if !strings.Contains(page, `id="discard-form"`) {
		t.Fatal("the dry run offers no discard")
	}
	for _, form := range []url.Values{
		{"topic": {"orders"}, "why": {"duplicates of a test"}},                        // no confirmation
		{"topic": {"orders"}, "confirm": {"yes"}},                                     // no reason
		{"topic": {"orders"}, "confirm": {"yes"}, "why": {"a\nb"}},                    // not one line
		{"topic": {"orders"}, "confirm": {"yes"}, "why": {strings.Repeat("w", 1001)}}, // too long
		{"reason": {"bogus"}, "confirm": {"yes"}, "why": {"x"}},                       // invalid filter
	} {
		if resp := post(t, srv, "/discard", form); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400", form, resp.StatusCode)
		}
	}
	resp := post(t, srv, "/discard", url.Values{"topic": {"orders"}, "confirm": {"yes"}, "why": {"test orders <b>from staging</b>"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "list?state=discarded" {
		t.Fatalf("discard: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for id, want := range map[string]archive.State{"d1": archive.StateDiscarded, "d2": archive.StateDiscarded, "keep": archive.StateOpen} {
		e, err := ar.Get(ctx, envelope.DeadLetterUUID(id))
		if err != nil || e.State != want {
			t.Errorf("%s: state %q (%v), want %q", id, e.State, err, want)
		}
	}
	if !strings.Contains(audit.String(), `"msg":"console: discard","who":"unauthenticated","filter":"topic=orders","reason":"test orders <b>from staging</b>","discarded":2`) {
		t.Errorf("the audit log lacks the discard: %s", audit.String())
	}
	// The default list shows open entries; state=discarded the tombstones.
	if _, page := get(t, srv, "/list"); strings.Count(page, `class="entry"`) != 1 {
		t.Error("the default list shows entries that are not open")
	}
	_, page = get(t, srv, "/list?state=discarded")
	if strings.Count(page, `class="entry"`) != 2 {
		t.Error("state=discarded does not list the tombstones")
	}
	_, page = get(t, srv, "/entry?id="+envelope.DeadLetterUUID("d1"))
	if !strings.Contains(page, `id="entry-state">discarded<`) || !strings.Contains(page, "test orders &lt;b&gt;from staging&lt;/b&gt;") {
		t.Error("the entry page does not show the discard and its escaped reason")
	}
	if _, page := get(t, srv, "/"); !strings.Contains(page, `id="total">1<`) || !strings.Contains(page, `href="list?state=discarded">discarded</a>`) {
		t.Error("the overview does not count open entries only, or lacks the states")
	}
	if code, _ := get(t, srv, "/list?state=lost"); code != http.StatusBadRequest {
		t.Errorf("an unknown state: %d, want 400", code)
	}
}

func TestRunsPageListsTheRuns(t *testing.T) {
	ar := newArchive(t, letter{uuid: "a", topic: "orders", retention: 72 * time.Hour})
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}))
	if _, page := get(t, srv, "/runs"); !strings.Contains(page, "No replay run yet") {
		t.Error("an empty runs page says nothing")
	}
	resp := post(t, srv, "/replay", url.Values{"rate": {"1000"}, "confirm": {"yes"}})
	runID := strings.TrimPrefix(resp.Header.Get("Location"), "run?id=")
	waitFor(t, "the run in the list", func() bool {
		_, page := get(t, srv, "/runs")
		return strings.Contains(page, `href="run?id=`+runID+`"`) && strings.Contains(page, "<td>done</td>")
	})
}
