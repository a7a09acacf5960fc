package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
)

// maxChain bounds the dead letters the operation page lists.
const maxChain = 100

// link is one dead letter of an operation's redelivery chain.
type link struct {
	Entry    archive.Entry
	ReplayOf string // the entry this one is the re-failure of (a replay)
	ReplayID string // the run that republished the message that failed again
}

type operationData struct {
	Namespace, Key string
	NoStore        bool
	Missing        bool
	Record         idempotency.Record
	Attempts       []attempt
	LeaseLeft      string
	Chain          []link
	More           bool
}

// operation shows an operation's record in the dedup store and its
// dead letters and replays: the redelivery chain on one page.
func (s *server) operation(w http.ResponseWriter, r *http.Request) {
	ns, key := r.URL.Query().Get("ns"), r.URL.Query().Get("key")
	if checkField(ns) != nil || checkField(key) != nil || key == "" {
		s.fail(w, r, http.StatusBadRequest, "the operation key is missing or not valid", nil)
		return
	}
	d := operationData{Namespace: ns, Key: key, NoStore: s.c.store == nil}
	if s.c.store != nil {
		rec, err := s.c.store.Get(r.Context(), ns, key)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
			d.Missing = true
		case err != nil:
			s.fail(w, r, http.StatusBadGateway, "the dedup store could not be read", err)
			return
		default:
			d.Record = rec
			d.Attempts = s.timeline(rec.History)
			if now := s.c.now(); rec.LeaseUntil.After(now) {
				d.LeaseLeft = rec.LeaseUntil.Sub(now).Round(time.Millisecond).String()
			}
		}
	}
	es, err := s.src.list(r.Context(), archive.Filter{Key: key}, archive.Page{Limit: maxChain + 1, OmitPayload: true})
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, "the archive could not be read", err)
		return
	}
	for _, e := range es {
		if ns != "" && e.Namespace != ns {
			continue
		}
		if len(d.Chain) == maxChain {
			d.More = true
			break
		}
		env, _ := dlq.ParseEnvelope(e.Message) // a field that does not parse is zero; the entry page says why
		d.Chain = append(d.Chain, link{Entry: e, ReplayOf: env.ReplayOf, ReplayID: env.ReplayID})
	}
	s.render(w, r, http.StatusOK, "operation", "Operation "+key, d)
}

// timeline is an attempt history as the page shows it: redacted, with
// durations and trace links, and the process that ran each attempt (its
// Owner, shown as it is).
func (s *server) timeline(hist []idempotency.AttemptRecord) []attempt {
	out := make([]attempt, 0, len(hist))
	for _, h := range hist {
		h.Error = s.redact(h.Error)
		h.Stack = s.redact(h.Stack)
		a := attempt{AttemptRecord: h, TraceURL: s.traceLink(h.TraceID, h.SpanID)}
		if !h.Ended.IsZero() && !h.Started.IsZero() {
			a.Duration = h.Ended.Sub(h.Started).Round(time.Millisecond).String()
		}
		out = append(out, a)
	}
	return out
}
