package redisstore

import (
	"encoding/json"
	"testing"
)

// TestHistoryIDs: the members are those json.Marshal writes, whatever the
// texts hold, and a claim with the usual IDs and owner costs one
// allocation for them.
func TestHistoryIDs(t *testing.T) {
	for _, v := range []string{
		"4bf92f3577b34da6a3ce929d0e0e4736", "worker-1.example.com/4242", `q"uote`, `back\slash`,
		"<b>&amp;</b>", "wörker/1", "tab\there", "del\x7f", "bad\xff", "line\u2028sep",
	} {
		got := historyIDs(v, "", v)
		var m struct {
			TraceID string `json:"trace_id"`
			Owner   string `json:"owner"`
		}
		if err := json.Unmarshal([]byte("{"+got[1:]+"}"), &m); err != nil {
			t.Fatalf("historyIDs(%q) = %s: not JSON members: %v", v, got, err)
		}
		q, _ := json.Marshal(v)
		if want := `,"trace_id":` + string(q) + `,"owner":` + string(q); got != want {
			t.Errorf("historyIDs(%q) = %s, want %s", v, got, want)
		}
	}
	if got := historyIDs("", "", ""); got != "" {
		t.Errorf("no IDs, no owner: %q", got)
	}
	if got := historyIDs("", "00f067aa0ba902b7", ""); got != `,"span_id":"00f067aa0ba902b7"` {
		t.Errorf("a span ID alone: %s", got)
	}
	n := testing.AllocsPerRun(100, func() {
		_ = historyIDs("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "worker-1.example.com/4242")
	})
	if n > 1 {
		t.Errorf("historyIDs allocates %v times, want 1", n)
	}
}
