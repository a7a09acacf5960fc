package sqlstore

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/surely-dev/surely/idempotency"
)

// TestHistPiecesSplitsOnlyTimes: the history is split where a time member
// holds the marker, not where a text (an owner, an error) holds the same
// digits, and the pieces joined around a clock reading are the history
// with that time.
func TestHistPiecesSplitsOnlyTimes(t *testing.T) {
	marker := strconv.FormatInt(histMarker, 10)
	text := `host` + marker + `/1 "started_ms":` + marker + ` _ms":` + marker
	h := []histEntry{
		{Attempt: 1, Started: 5, Ended: 6, Result: idempotency.ResultFailed, Error: text},
		{Attempt: 2, Started: histMarker, Ended: histMarker, Result: idempotency.ResultDone, Owner: text},
	}
	pieces, err := histPieces(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != 3 {
		t.Fatalf("histPieces split the history into %d pieces, want 3 (one per time marker): %q", len(pieces), pieces)
	}
	var got []histEntry
	if err := json.Unmarshal([]byte(strings.Join(pieces, "42")), &got); err != nil {
		t.Fatalf("the pieces joined by a clock reading are no history: %v", err)
	}
	if len(got) != 2 || got[1].Started != 42 || got[1].Ended != 42 || got[1].Owner != text || got[0].Error != text || got[0].Started != 5 {
		t.Fatalf("joined history = %+v", got)
	}
}
