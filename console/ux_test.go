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
