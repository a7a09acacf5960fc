package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
)

// maxRefusedShown bounds the refused entries a dry run lists.
const maxRefusedShown = 200

// refusal is one entry the retention guard refuses, and why.
type refusal struct{ ID, Reason string }

type dryRunData struct {
	Query       query
	Would       int
	Refused     []refusal
	RefusedN    int
	Err         string
	Rate        string
	Max         string
	ConfirmNeed bool
}

// selection reads the POSTed selection and resolves the parts the
// archive cannot filter (the error type) into a list of IDs.
func (s *server) selection(ctx context.Context, r *http.Request) (query, error) {
	q, err := parseQuery(r.PostForm)
	if err == nil && r.PostForm.Get("scope") == "selected" && len(q.IDs) == 0 {
		err = fmt.Errorf("no entry selected: tick entries, or replay all matching the filter")
	}
	if err != nil || q.ErrType == "" {
		return q, err
	}
	var ids []string
	p := archive.Page{Limit: 1000, OmitPayload: true}
	for {
		es, err := s.src.list(ctx, q.filter, p)
		if err != nil {
			return q, err
		}
		for _, e := range es {
			if q.matches(e) {
				ids = append(ids, e.ID)
			}
		}
		if len(ids) > maxIDs {
			return q, fmt.Errorf("more than %d entries have error type %q: narrow the filter", maxIDs, q.ErrType)
		}
		if len(es) < p.Limit {
			break
		}
		p.After = es[len(es)-1].Seq
	}
	if len(ids) == 0 {
		ids = []string{"-"} // no entry has this ID: selects nothing
	}
	q.filter.IDs = ids
	return q, nil
}

// dryRun shows what a replay of the selection would do: the count, and
// every entry the retention guard refuses and why.
func (s *server) dryRun(w http.ResponseWriter, r *http.Request) {
	q, err := s.selection(r.Context(), r)
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay: dry run", dryRunData{Query: q, Err: err.Error()})
		return
	}
	d := dryRunData{Query: q}
	opts := append(append([]dlq.Option{}, s.c.replayOpts...), replay.WithDryRun(), replay.WithProgress(func(p replay.Progress) {
		if p.Action != replay.ActionWouldRefuse {
			return
		}
		d.RefusedN++
		if len(d.Refused) < maxRefusedShown {
			d.Refused = append(d.Refused, refusal{p.EntryID, s.redact(p.Reason)})
		}
	}))
	res, err := s.src.replay(r.Context(), s.c.pub, q.filter, opts...)
	if err != nil {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay: dry run", dryRunData{Query: q, Err: s.redact(err.Error())})
		return
	}
	d.Would = res.WouldReplay
	s.audit(r, "replay dry run", "filter", q.values().Encode(), "would_replay", d.Would, "would_refuse", d.RefusedN)
	s.render(w, r, http.StatusOK, "dryrun", "Replay: dry run", d)
}

// replay starts a replay run of the selection, confirmed, at a rate and
// up to a maximum, and redirects to its page.
func (s *server) replay(w http.ResponseWriter, r *http.Request) {
	q, err := s.selection(r.Context(), r)
	bad := func(msg string) {
		s.render(w, r, http.StatusBadRequest, "dryrun", "Replay: dry run", dryRunData{
			Query: q, Err: msg, Rate: r.PostForm.Get("rate"), Max: r.PostForm.Get("max"),
		})
	}
	if err != nil {
		bad(err.Error())
		return
	}
	rate, err := strconv.ParseFloat(r.PostForm.Get("rate"), 64)
	if err != nil || rate <= 0 || rate > 100000 {
		bad(fmt.Sprintf("rate: %q is not a number of messages per second between 0 and 100000", r.PostForm.Get("rate")))
		return
	}
	maxN := 0
	if m := r.PostForm.Get("max"); m != "" {
		if maxN, err = strconv.Atoi(m); err != nil || maxN < 0 {
			bad(fmt.Sprintf("max: %q is not a count", m))
			return
		}
	}
	if r.PostForm.Get("confirm") != "yes" {
		bad("confirm the replay: tick the box")
		return
	}
	id := uuid.NewString()
	opts := append(append([]dlq.Option{}, s.c.replayOpts...), replay.WithID(id), replay.WithRate(rate), replay.WithMax(maxN))
	s.audit(r, "replay started", "run", id, "filter", q.values().Encode(), "rate", rate, "max", maxN)
	started := make(chan error, 1)
	ctx := context.WithoutCancel(r.Context())
	go func() {
		res, err := s.src.replay(ctx, s.c.pub, q.filter, append(opts, replay.WithProgress(func(replay.Progress) {
			select {
			case started <- nil:
			default:
			}
		}))...)
		select {
		case started <- err:
		default:
		}
		attrs := []any{"run", id, "replayed", res.Replayed, "refused", res.Refused, "failed_again", res.Refailed, "state", res.State}
		if err != nil {
			attrs = append(attrs, "error", s.redact(err.Error()))
		}
		s.audit(r, "replay finished", attrs...)
	}()
	// Wait until the run is saved (its first decision) or failed to start.
	if err := <-started; err != nil {
		bad(s.redact(err.Error()))
		return
	}
	// Relative, so it stays under the prefix (http.Redirect would make it
	// absolute).
	w.Header().Set("Location", "run?id="+url.QueryEscape(id))
	w.WriteHeader(http.StatusSeeOther)
}
