package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/surely-dev/surely/internal/errtext"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// stamp formats a time in UTC, or "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// stampMilli is stamp with milliseconds, for attempt ledgers.
func stampMilli(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// age formats d for people: 42s, 12m, 5h12m, 3d4h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// ageJSON is an age in whole seconds, as a Go duration string.
func ageJSON(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Truncate(time.Second).String()
}

// clip shortens s to n runes on one line, marking the cut with "…".
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// clipCause is errtext.Clip: the end of a wrapped error, where the root
// cause is.
func clipCause(s string, n int) string { return errtext.Clip(s, n) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// counted is one row of a count table.
type counted struct {
	Name  string
	Count int
}

// byCount sorts a count map, largest first, then by name.
func byCount(m map[string]int) []counted {
	out := make([]counted, 0, len(m))
	for k, v := range m {
		out = append(out, counted{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// payloadView is a payload as shown: text when it is valid UTF-8, else base64.
type payloadView struct {
	Bytes    int    `json:"bytes"`
	Encoding string `json:"encoding"` // text or base64
	Data     string `json:"data"`
}

func viewPayload(p []byte) payloadView {
	if utf8.Valid(p) {
		return payloadView{Bytes: len(p), Encoding: "text", Data: string(p)}
	}
	return payloadView{Bytes: len(p), Encoding: "base64", Data: base64.StdEncoding.EncodeToString(p)}
}

// stickyWriter remembers the first write error, so that the commands can
// print freely and execute reports a failed output once, at the end.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	if err != nil {
		s.err = err
	}
	return n, err
}

// fprintf and fprintln print to w, a stickyWriter of the app or a table
// over one: a write error is kept there and reported by execute.
func fprintf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
func fprintln(w io.Writer, a ...any)               { _, _ = fmt.Fprintln(w, a...) }
