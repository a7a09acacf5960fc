package console_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/surely-dev/surely/console"
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
