package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/errtext"
)

// maxPayloadShown bounds the payload bytes an entry page shows.
const maxPayloadShown = 256 << 10

func funcs(c config) template.FuncMap {
	return template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"rootType": envelope.RootErrorType,
		"cause":    errtext.Clip,
		"redact":   func(s string) string { return applyRedactor(c.redact, s) },
		"short": func(s string, n int) string {
			if utf8.RuneCountInString(s) <= n {
				return s
			}
			return string([]rune(s)[:n]) + "…"
		},
		"orNone": func(s string) string {
			if s == "" {
				return "(none)"
			}
			return s
		},
		"running": func(state string) bool { return state == "running" },
		"states":  func() []string { return []string{"open", "replayed", "resolved", "discarded", "all"} },
		"reasons": func() []string {
			return []string{"exhausted", "permanent", "conflict", "no_key", "lease_lost", "panic", "decode"}
		},
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
			return m
		},
	}
}

// redact applies the configured redactor, containing its panics as the
// envelope does.
func (s *server) redact(text string) string { return applyRedactor(s.c.redact, text) }

// applyRedactor runs r over text; a nil r returns text, a panicking r
// the envelope's placeholder.
func applyRedactor(r func(string) string, text string) (out string) {
	if r == nil || text == "" {
		return text
	}
	defer func() {
		if recover() != nil {
			out = envelope.RedactorPanicked
		}
	}()
	return r(text)
}

// field is one name and value of the envelope or the metadata.
type field struct{ Name, Value string }

// attempt is one row of the attempt timeline.
type attempt struct {
	idempotency.AttemptRecord
	Duration string
	TraceURL string
}

type entryData struct {
	Entry         archive.Entry
	Error         string
	Envelope      []field
	Metadata      []field
	Attempts      []attempt
	HistoryErr    string
	Host          string
	TraceURL      string
	PayloadShown  bool
	PayloadKind   string
	Payload       string
	PayloadSize   int
	PayloadCut    bool
	PayloadLinkID string
}

func (s *server) entryView(e archive.Entry, show bool) entryData {
	d := entryData{Entry: e, Error: s.redact(e.Error), PayloadShown: show}
	md := e.Message.Metadata
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == dlq.KeyHistory {
			continue
		}
		f := field{k, s.redact(md[k])}
		if strings.HasPrefix(k, "surely_") {
			d.Envelope = append(d.Envelope, f)
		} else {
			d.Metadata = append(d.Metadata, f)
		}
	}
	env, err := dlq.ParseEnvelope(e.Message)
	if err != nil {
		d.HistoryErr = s.redact(err.Error())
	}
	d.Host = env.Host
	d.TraceURL = s.traceLink(env.TraceID, env.SpanID)
	hist := env.History
	d.Attempts = s.timeline(hist)
	d.PayloadSize = len(e.Message.Payload)
	if show {
		d.PayloadKind, d.Payload, d.PayloadCut = s.payload(e.Message.Payload)
	}
	return d
}

// payload renders a payload as pretty JSON, text or a hex dump, chosen by
// its content, redacted, cut to maxPayloadShown.
func (s *server) payload(p []byte) (kind, text string, cut bool) {
	if len(p) > maxPayloadShown {
		p, cut = p[:maxPayloadShown], true
	}
	var buf bytes.Buffer
	switch {
	case !cut && json.Valid(p) && json.Indent(&buf, p, "", "  ") == nil:
		return "JSON", s.redact(buf.String()), cut
	case utf8.Valid(p) && printable(p):
		return "text", s.redact(string(p)), cut
	}
	if len(p) > 64<<10 {
		p, cut = p[:64<<10], true
	}
	return "binary (hex)", s.redact(hex.Dump(p)), cut
}

// printable reports whether text has no control characters but tab,
// newline and carriage return.
func printable(p []byte) bool {
	for _, r := range string(p) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}

// traceLink is the trace UI's URL of a trace and span, or "".
func (s *server) traceLink(traceID, spanID string) string {
	if s.c.traceURL == "" || traceID == "" {
		return ""
	}
	return strings.NewReplacer("{trace_id}", url.PathEscape(traceID), "{span_id}", url.QueryEscape(spanID)).Replace(s.c.traceURL)
}

// age is a duration for people: "3h12m", "5d4h".
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < 24*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := int(d / (24 * time.Hour))
	return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
}

// chart is the arrivals chart, drawn by the template as SVG.
type chart struct {
	Bars      []bar
	Max       int
	Total     int
	From, To  time.Time
	Truncated bool
	Width     int
	Height    int
}

// bar is one bucket: its position and height in the SVG, its count and
// start time for the title.
type bar struct {
	X, Y, W, H int
	N          int
	At         time.Time
}

// Chart geometry, in SVG user units.
const (
	chartW   = 720
	chartH   = 160
	chartPad = 20
)

func newChart(start time.Time, counts []int, truncated bool) chart {
	c := chart{From: start, To: start.Add(chartWindow), Truncated: truncated, Width: chartW, Height: chartH + 2*chartPad}
	for _, n := range counts {
		c.Max = max(c.Max, n)
		c.Total += n
	}
	w := chartW / len(counts)
	for i, n := range counts {
		h := 0
		if c.Max > 0 {
			h = n * chartH / c.Max
		}
		if n > 0 && h == 0 {
			h = 1
		}
		c.Bars = append(c.Bars, bar{
			X: i * w, Y: chartH - h, W: w - 2, H: h, N: n,
			At: start.Add(time.Duration(i) * chartWindow / time.Duration(len(counts))),
		})
	}
	return c
}
