package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
)

// The list's error column shows the root cause of a long wrapped error
// (its end), as ls does, not the wrappers at its start.
func TestListShowsTheErrorsRootCause(t *testing.T) {
	cause := fmt.Errorf("charge order-1: %s: dial tcp 10.0.0.7:5432: connect: connection refused", strings.Repeat("calling the payment gateway ", 6))
	srv := serve(t, newArchive(t, letter{uuid: "m1", topic: "orders", err: cause}), console.WithoutAuth())
	_, page := get(t, srv, "/list")
	if !strings.Contains(page, "connect: connection refused</td>") {
		t.Errorf("the list's error column cuts off the root cause:\n%s", page[strings.Index(page, `class="err"`):])
	}
}

// A page past the end says there is nothing on it, how many match, and
// links to the first page; it offers no bulk action.
func TestListPagePastTheEnd(t *testing.T) {
	var ls []letter
	for i := range 10 {
		ls = append(ls, letter{uuid: fmt.Sprintf("m%02d", i), topic: "orders"})
	}
	srv := serve(t, newArchive(t, ls...), console.WithoutAuth(), console.WithPublisher(&recorder{}))
	_, page := get(t, srv, "/list?topic=orders&after=1000")
	if !strings.Contains(page, `id="past-end">No dead letter on this page; <b>10</b> match: <a href="list?topic=orders">back to the first page</a>`) {
		t.Errorf("a page past the end does not say so coherently:\n%s", page)
	}
	if strings.Contains(page, "No dead letter matches") || strings.Contains(page, `id="matching"`) {
		t.Error("a page past the end says both that 10 match and that none does")
	}
	if strings.Contains(page, `id="replay-all"`) || strings.Contains(page, `id="replay-selected"`) {
		t.Error("a page past the end offers a bulk action")
	}
	// Not counted (a key search): still coherent, with the link.
	_, page = get(t, srv, "/list?key=nope&after=1000")
	if !strings.Contains(page, `id="past-end">No dead letter on this page: <a href="list?key=nope">back to the first page</a>`) {
		t.Errorf("an uncounted page past the end does not say so:\n%s", page)
	}
}

// An empty selection offers no replay or discard.
func TestListHidesActionsOnEmptyResults(t *testing.T) {
	srv := serve(t, newArchive(t, letter{uuid: "m1", topic: "orders"}), console.WithoutAuth(), console.WithPublisher(&recorder{}))
	for _, path := range []string{"/list?topic=invoices", "/list?q=nothing-like-this"} {
		_, page := get(t, srv, path)
		if !strings.Contains(page, "No dead letter matches") {
			t.Fatalf("%s: selects entries", path)
		}
		if strings.Contains(page, `id="replay-all"`) || strings.Contains(page, `id="replay-selected"`) {
			t.Errorf("%s: the empty selection offers replay or discard", path)
		}
	}
	if _, page := get(t, srv, "/list?topic=orders"); !strings.Contains(page, `id="replay-all"`) || !strings.Contains(page, `id="replay-selected"`) {
		t.Error("a selection with entries offers no replay or discard")
	}
}

// The from and to fields read relative times on the console's clock (t0)
// and say by their placeholders that they take examples, not values.
func TestListFromReadsRelativeTimes(t *testing.T) {
	srv := serve(t, newArchive(t,
		letter{uuid: "old", topic: "orders", at: t0.Add(-26 * time.Hour)},
		letter{uuid: "day", topic: "orders", at: t0.Add(-3 * time.Hour)},
		letter{uuid: "new", topic: "orders", at: t0.Add(-20 * time.Minute)},
	), console.WithoutAuth())
	// t0 is 12:00 UTC: today starts 12h back, yesterday 36h back.
	for q, want := range map[string]int{"from=30m": 1, "from=1h": 1, "from=4h": 2, "from=2d": 3, "from=today": 2, "from=yesterday": 3, "to=1h": 2, "from=2d&to=today": 1} {
		code, page := get(t, srv, "/list?"+q+"&count=1")
		if code != http.StatusOK {
			t.Errorf("list?%s: status %d", q, code)
			continue
		}
		if got := strings.Count(page, `class="entry"`); got != want {
			t.Errorf("list?%s lists %d entries, want %d", q, got, want)
		}
	}
	_, page := get(t, srv, "/list")
	if !strings.Contains(page, `name="from" value="" placeholder="e.g. 2026-12-01 or 1h"`) {
		t.Error("the from field's placeholder does not read as an example")
	}
}

// A done run's page links to the entries it replayed whose outcome is
// still pending (state replayed), and the link lists them.
func TestRunPageLinksThePendingEntries(t *testing.T) {
	ar := newArchive(t, letter{uuid: "o1", topic: "orders", retention: 72 * time.Hour},
		letter{uuid: "o2", topic: "orders", retention: 72 * time.Hour},
		letter{uuid: "i1", topic: "invoices", retention: 72 * time.Hour})
	if _, err := replay.Run(t.Context(), ar, &recorder{}, archive.Filter{Topic: "orders", States: []archive.State{archive.StateOpen}},
		replay.WithID("r1"), dlq.WithClock(func() time.Time { return t0 })); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth())
	_, page := get(t, srv, "/run?id=r1")
	const link = `<a id="pending-link" href="list?replayedby=r1&amp;state=replayed">`
	if !strings.Contains(page, `id="state">done<`) || !strings.Contains(page, link) {
		t.Fatalf("a done run's page does not link its pending entries:\n%s", page)
	}
	_, page = get(t, srv, "/list?replayedby=r1&state=replayed&count=1")
	if strings.Count(page, `class="entry"`) != 2 || strings.Contains(page, ">invoices<") || !strings.Contains(page, `id="matching"><b>2</b>`) {
		t.Errorf("the pending entries' list does not list the run's 2 replayed entries:\n%s", page)
	}
	if !strings.Contains(page, `name="replayedby" value="r1"`) {
		t.Error("the list's filter form drops the run")
	}
}
