package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/surely-dev/surely/middleware"
)

// spanRecord is one line of a process's span file: written when a span
// starts (so a process killed mid-span still leaves a trace of it) and
// again, complete, when it ends.
type spanRecord struct {
	Event    string            `json:"event"` // start | end
	Process  string            `json:"process"`
	PID      int               `json:"pid"`
	Name     string            `json:"name"`
	Kind     string            `json:"kind"`
	TraceID  string            `json:"trace_id"`
	SpanID   string            `json:"span_id"`
	Parent   string            `json:"parent_span_id,omitempty"`
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end,omitzero"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Links    []linkRecord      `json:"links,omitempty"`
	Status   string            `json:"status,omitempty"`
	ErrorMsg string            `json:"error,omitempty"`
}

type linkRecord struct {
	TraceID string            `json:"trace_id"`
	SpanID  string            `json:"span_id"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// fileRecorder is a span processor that appends every span to a file of
// its process, one JSON line per start and per end. Each line is a single
// write: a SIGKILL loses nothing already written.
type fileRecorder struct {
	mu      sync.Mutex
	f       *os.File
	process string
}

func newFileRecorder(path, process string) (*fileRecorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &fileRecorder{f: f, process: process}, nil
}

func (r *fileRecorder) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	r.write("start", tracetest.SpanStubFromReadOnlySpan(s))
}

func (r *fileRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.write("end", tracetest.SpanStubFromReadOnlySpan(s))
}

func (r *fileRecorder) Shutdown(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

func (r *fileRecorder) ForceFlush(context.Context) error { return nil }

func (r *fileRecorder) write(event string, s tracetest.SpanStub) {
	rec := spanRecord{
		Event: event, Process: r.process, PID: os.Getpid(), Name: s.Name, Kind: s.SpanKind.String(),
		TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(),
		Start: s.StartTime, End: s.EndTime, Attrs: attrs(s.Attributes),
	}
	if s.Parent.IsValid() {
		rec.Parent = s.Parent.SpanID().String()
	}
	for _, l := range s.Links {
		rec.Links = append(rec.Links, linkRecord{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String(), Attrs: attrs(l.Attributes)})
	}
	if event == "end" && s.Status.Code.String() != "Unset" {
		rec.Status, rec.ErrorMsg = s.Status.Code.String(), s.Status.Description
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(append(line, '\n'))
}

func attrs(kvs []attribute.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// span is a span merged from every process's file.
type span struct {
	spanRecord
	Ended bool // false: its process died before the span ended
}

// readSpans merges the span files of dir: the end record of a span wins
// over its start record.
func readSpans(dir string) ([]*span, error) {
	files, err := filepath.Glob(filepath.Join(dir, "spans-*.jsonl"))
	if err != nil {
		return nil, err
	}
	byID := map[string]*span{}
	for _, name := range files {
		if err := readFile(name, byID); err != nil {
			return nil, err
		}
	}
	out := make([]*span, 0, len(byID))
	for _, s := range byID {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

func readFile(name string, byID map[string]*span) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var rec spanRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			// The last line of a killed process may be cut short.
			continue
		}
		s := byID[rec.SpanID]
		if s == nil || rec.Event == "end" {
			byID[rec.SpanID] = &span{spanRecord: rec, Ended: rec.Event == "end"}
		}
	}
	return sc.Err()
}

var errNoSpans = errors.New("no spans recorded")

// shortID abbreviates a span or trace ID for the printout.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// durationOf formats how long a span ran.
func durationOf(s *span) string {
	if !s.Ended {
		return "never ended"
	}
	return s.End.Sub(s.Start).Round(100 * time.Microsecond).String()
}

func describeLink(l linkRecord, byID map[string]*span, attempts map[string]int) string {
	what := l.Attrs[string(middleware.AttrLink)]
	target := shortID(l.SpanID)
	if n, ok := attempts[l.SpanID]; ok {
		target = fmt.Sprintf("attempt %d", n)
	} else if s, ok := byID[l.SpanID]; ok {
		target = fmt.Sprintf("%q", s.Name)
	}
	extra := ""
	if p := l.Attrs[string(middleware.AttrPrevious)]; p != "" {
		extra = fmt.Sprintf(" (ledger: %s)", p)
	}
	return fmt.Sprintf("%s → %s [span %s]%s", what, target, shortID(l.SpanID), extra)
}
