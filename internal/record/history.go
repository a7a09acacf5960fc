package record

import (
	"time"

	"github.com/surely-dev/surely/idempotency"
)

// Entry is one attempt of a record's history as redisstore and sqlstore
// keep it, in JSON, with its times in milliseconds of the store's clock:
// T is int64 in sqlstore, float64 in redisstore (whose Lua scripts write
// numbers that JSON may read as floats).
type Entry[T int64 | float64] struct {
	Attempt int                       `json:"attempt"`
	Started T                         `json:"started_ms"`
	Ended   T                         `json:"ended_ms,omitempty"`
	Result  idempotency.AttemptResult `json:"result"`
	Error   string                    `json:"error,omitempty"`
	Type    string                    `json:"type,omitempty"`
	Reason  string                    `json:"reason,omitempty"`
	Stack   string                    `json:"stack,omitempty"`
	TraceID string                    `json:"trace_id,omitempty"`
	SpanID  string                    `json:"span_id,omitempty"`
	Owner   string                    `json:"owner,omitempty"`
}

// Attempts returns the attempt records of the stored history hs, nil when
// it is empty.
func Attempts[T int64 | float64](hs []Entry[T]) []idempotency.AttemptRecord {
	if len(hs) == 0 {
		return nil
	}
	out := make([]idempotency.AttemptRecord, len(hs))
	for i, h := range hs {
		out[i] = idempotency.AttemptRecord{
			Attempt: h.Attempt,
			Started: FromMs(int64(h.Started)),
			Ended:   FromMs(int64(h.Ended)),
			Result:  h.Result,
			Error:   h.Error,
			Type:    h.Type,
			Reason:  h.Reason,
			Stack:   h.Stack,
			TraceID: h.TraceID,
			SpanID:  h.SpanID,
			Owner:   h.Owner,
		}
	}
	return out
}

// Entries returns the stored form of the attempt records h (Attempts
// reversed).
func Entries(h []idempotency.AttemptRecord) []Entry[int64] {
	if len(h) == 0 {
		return nil
	}
	out := make([]Entry[int64], len(h))
	for i, a := range h {
		out[i] = Entry[int64]{
			Attempt: a.Attempt,
			Started: Ms(a.Started),
			Ended:   Ms(a.Ended),
			Result:  a.Result,
			Error:   a.Error,
			Type:    a.Type,
			Reason:  a.Reason,
			Stack:   a.Stack,
			TraceID: a.TraceID,
			SpanID:  a.SpanID,
			Owner:   a.Owner,
		}
	}
	return out
}

// FromMs is the time of v milliseconds since 1970, the zero time for 0 (or
// less: none).
func FromMs(v int64) time.Time {
	if v <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// Ms is t in milliseconds since 1970, 0 for the zero time (FromMs
// reversed).
func Ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// RoundMs rounds d up to whole milliseconds, the resolution of redisstore
// and sqlstore.
func RoundMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}
