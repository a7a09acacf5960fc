package console

import (
	"cmp"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/when"
)

// query is a list or replay selection as the page's form gives it.
type query struct {
	Reason, Topic, Handler, ErrType, Key, Text string
	Site                                       string // the call site
	Replay                                     string // the re-failures of this replay run
	ReplayedBy                                 string // the entries this replay run republished
	State                                      string // a lifecycle state, or "all"; default open
	From, To                                   string // a time as when.Parse reads it: "2026-12-01T15:04" (UTC), "1h" (ago), "yesterday"
	IDs                                        []string
	After                                      int64

	filter archive.Filter
}

// maxField bounds every filter value; maxIDs the entries one selection names.
const (
	maxField = 512
	maxIDs   = 1000
)

// parseQuery reads and checks a selection; from and to's relative times
// count back from now (the console's clock). An invalid value is an
// error naming it.
func parseQuery(v url.Values, now time.Time) (query, error) {
	q := query{
		Reason: v.Get("reason"), Topic: v.Get("topic"), Handler: v.Get("handler"),
		ErrType: v.Get("errtype"), Site: v.Get("site"), Key: v.Get("key"), Text: v.Get("q"),
		From: v.Get("from"), To: v.Get("to"), IDs: v["id"], Replay: v.Get("replay"), ReplayedBy: v.Get("replayedby"),
		State: cmp.Or(v.Get("state"), string(archive.StateOpen)),
	}
	for name, s := range map[string]string{"reason": q.Reason, "topic": q.Topic, "handler": q.Handler, "errtype": q.ErrType, "site": q.Site, "key": q.Key, "q": q.Text, "replay": q.Replay, "replayedby": q.ReplayedBy} {
		if err := checkField(s); err != nil {
			return q, fmt.Errorf("filter %s: %w", name, err)
		}
	}
	if q.Reason != "" && !knownReason(q.Reason) {
		return q, fmt.Errorf("filter reason: %q is not a dead-letter reason", q.Reason)
	}
	states, ok := lifecycle[q.State]
	if !ok {
		return q, fmt.Errorf("filter state: %q is not open, replayed, resolved, discarded or all", q.State)
	}
	if len(q.IDs) > maxIDs {
		return q, fmt.Errorf("a selection names at most %d entries, got %d", maxIDs, len(q.IDs))
	}
	for _, id := range q.IDs {
		if err := checkField(id); err != nil || id == "" {
			return q, fmt.Errorf("entry ID %q is not valid", id)
		}
	}
	var err error
	if s := v.Get("after"); s != "" {
		if q.After, err = strconv.ParseInt(s, 10, 64); err != nil || q.After < 0 {
			return q, fmt.Errorf("after: %q is not a cursor", s)
		}
	}
	q.filter = archive.Filter{
		IDs: q.IDs, Reason: dlq.Reason(q.Reason), Topic: q.Topic, Handler: q.Handler,
		ErrorType: q.ErrType, ErrorSite: q.Site, Key: q.Key, Search: q.Text, ReplayID: q.Replay, ReplayedBy: q.ReplayedBy, States: states,
	}
	if q.filter.DeadLetteredAfter, err = parseTime("from", q.From, now); err != nil {
		return q, err
	}
	if q.filter.DeadLetteredBefore, err = parseTime("to", q.To, now); err != nil {
		return q, err
	}
	return q, nil
}

// lifecycle maps the state filter's values to the archive's states.
var lifecycle = map[string][]archive.State{
	"all":                          nil,
	string(archive.StateOpen):      {archive.StateOpen},
	string(archive.StateReplayed):  {archive.StateReplayed},
	string(archive.StateResolved):  {archive.StateResolved},
	string(archive.StateDiscarded): {archive.StateDiscarded},
}

func checkField(s string) error {
	if len(s) > maxField {
		return fmt.Errorf("longer than %d bytes", maxField)
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return fmt.Errorf("%q has control characters", s)
	}
	return nil
}

func knownReason(r string) bool {
	switch dlq.Reason(r) {
	case dlq.ReasonExhausted, dlq.ReasonPermanent, dlq.ReasonConflict, dlq.ReasonNoKey,
		dlq.ReasonLeaseLost, dlq.ReasonPanic, dlq.ReasonDecode:
		return true
	}
	return false
}

// parseTime reads a from or to field (when.Parse); empty is no bound.
func parseTime(name, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := when.Parse(s, now)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

// values is the selection as URL values, without the cursor.
func (q query) values() url.Values {
	v := url.Values{}
	state := q.State
	if state == string(archive.StateOpen) {
		state = "" // the default
	}
	for k, s := range map[string]string{"reason": q.Reason, "topic": q.Topic, "handler": q.Handler, "errtype": q.ErrType, "site": q.Site, "key": q.Key, "q": q.Text, "from": q.From, "to": q.To, "replay": q.Replay, "replayedby": q.ReplayedBy, "state": state} {
		if s != "" {
			v.Set(k, s)
		}
	}
	for _, id := range q.IDs {
		v.Add("id", id)
	}
	return v
}

// Encode is the selection as a query string (for links): url.Values
// escapes it, so the template may take it as it is.
func (q query) Encode() template.URL { return template.URL(q.values().Encode()) } //nolint:gosec // escaped by url.Values

// Fields lists the selection as name/value pairs (for hidden form fields).
func (q query) Fields() [][2]string {
	var out [][2]string
	for _, k := range []string{"state", "reason", "topic", "handler", "errtype", "site", "key", "q", "from", "to", "replay", "replayedby"} {
		if s := q.values().Get(k); s != "" {
			out = append(out, [2]string{k, s})
		}
	}
	for _, id := range q.IDs {
		out = append(out, [2]string{"id", id})
	}
	return out
}

// Empty reports whether the selection selects everything.
func (q query) Empty() bool { return len(q.values()) == 0 }

// counted reports whether the list page counts the entries the selection
// matches as it shows them: the selection is by the columns every
// archive counts without reading the entries (state, reason, topic,
// handler, error type). A count by key, text, time or replay run (its
// re-failures or the entries it republished) reads
// every entry the filter selects, so the page counts those on request
// (count=1); a replay's dry run always counts.
func (q query) counted() bool {
	return q.Key == "" && q.Text == "" && q.From == "" && q.To == "" && q.Replay == "" && q.ReplayedBy == "" && len(q.IDs) == 0
}
