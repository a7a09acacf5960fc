package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/runcancel"
)

// runJSON is a replay run in runs --json and runs show --json.
type runJSON struct {
	ID       string    `json:"id"`
	State    string    `json:"state"`
	Started  time.Time `json:"started"`
	Updated  time.Time `json:"updated"`
	Replayed int       `json:"replayed"`
	Refused  int       `json:"refused"`
	Refailed int       `json:"failed_again"`
	Resolved int       `json:"resolved"`
	// Rate is the run's average publishes per second, from its start to
	// its last save (the first publish goes at once: n publishes, n-1
	// intervals).
	Rate   float64 `json:"rate_per_second"`
	Cursor int64   `json:"cursor"`
	Target string  `json:"target,omitempty"`
	NewKey bool    `json:"new_key,omitempty"`
	Force  bool    `json:"force,omitempty"`
	// Filter is the selection the run replays, as the flags of replay.
	Filter string `json:"filter"`
}

func toRunJSON(r archive.ReplayRun) runJSON {
	out := runJSON{
		ID: r.ID, State: string(r.State), Started: r.Started.UTC(), Updated: r.Updated.UTC(),
		Replayed: r.Replayed, Refused: r.Refused, Refailed: r.Refailed, Resolved: r.Resolved,
		Cursor: r.After, Target: r.Target, NewKey: r.NewKey, Force: r.Force, Filter: describeFilter(r.Filter),
	}
	if d := r.Updated.Sub(r.Started); d > 0 && r.Replayed > 1 {
		out.Rate = float64(r.Replayed-1) / d.Seconds()
	}
	return out
}

// describeFilter writes a run's filter as the replay flags that select it.
func describeFilter(f archive.Filter) string {
	var parts []string
	add := func(flag, v string) {
		if v != "" {
			parts = append(parts, flag+" "+v)
		}
	}
	if len(f.IDs) > 0 {
		parts = append(parts, fmt.Sprintf("%d IDs", len(f.IDs)))
	}
	add("--reason", string(f.Reason))
	add("--topic", f.Topic)
	add("--handler", f.Handler)
	add("--key", f.Key)
	add("--error", f.ErrorContains)
	add("--error-type", f.ErrorType)
	add("--search", f.Search)
	add("--replay-id", f.ReplayID)
	if !f.DeadLetteredBefore.IsZero() {
		add("--older-than", stamp(f.DeadLetteredBefore))
	}
	if !f.DeadLetteredAfter.IsZero() {
		add("--newer-than", stamp(f.DeadLetteredAfter))
	}
	states := make([]string, len(f.States))
	for i, s := range f.States {
		states[i] = string(s)
	}
	if len(states) > 0 {
		add("--state", strings.Join(states, ","))
	} else {
		add("--state", "all")
	}
	return strings.Join(parts, " ")
}

// runEntryJSON is one entry a run replayed, in runs show.
type runEntryJSON struct {
	ID            string `json:"id"`
	Seq           int64  `json:"seq"`
	Key           string `json:"key"`
	Topic         string `json:"topic"`
	Outcome       string `json:"outcome"` // resolved, failed_again, pending, or the entry's state
	FailedAgainAs string `json:"failed_again_as,omitempty"`
}

type runShowJSON struct {
	runJSON
	// Reconciled is set when --store confirmed resolutions.
	Reconciled *reconcileJSON `json:"reconciled,omitempty"`
	Entries    []runEntryJSON `json:"entries"`
}

type reconcileJSON struct {
	Resolved int `json:"resolved"`
	Pending  int `json:"pending"`
}

func (a *app) runsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List replay runs with their state, counts and rate",
		Long: `runs lists the replay runs kept in the archive, the most recently started
first: their state (running, paused, interrupted, aborted, canceled, done), how
many entries each replayed, refused, saw fail again and saw resolved, and
its average rate. "runs show RUN" shows one with its entries; "runs
cancel RUN" stops one.

A replayed entry is resolved once its operation completed. With --store
(or SURELY_STORE_URL), runs first reads the dedup records of every run's
replayed entries whose outcome is not known yet (one round trip per
namespace where the store allows) and marks resolved those whose record
is done: run it once the consumer had time to process the replayed
messages; "dlq stats --state resolved" then counts them.`,
		Example: `  surely dlq runs
  surely dlq runs --store redis://localhost:6379/0
  surely dlq runs show 0b8f1c3e-7d2a-4f4b-9c1d-2e3f4a5b6c7d --store redis://localhost:6379/0
  surely dlq runs cancel 0b8f1c3e-7d2a-4f4b-9c1d-2e3f4a5b6c7d`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ar, err := a.openArchive(cmd)
			if err != nil {
				return err
			}
			defer ar.close()
			ctx := cmd.Context()
			var rec *reconcileJSON
			if flagValue(cmd, "store") != "" {
				if rec, err = a.reconcileRuns(cmd, ar); err != nil {
					return err
				}
			}
			runs, err := ar.ListReplays(ctx)
			if err != nil {
				return fmt.Errorf("list runs: %w", err)
			}
			out := make([]runJSON, len(runs))
			for i, r := range runs {
				out[i] = toRunJSON(r)
			}
			if asJSON {
				return writeJSON(a.stdout, runsJSON{Runs: out, Reconciled: rec})
			}
			if rec != nil {
				fprintf(a.stdout, "checked in the store: %d resolved now, %d still pending\n\n", rec.Resolved, rec.Pending)
			}
			if len(out) == 0 {
				fprintln(a.stdout, "no replay runs")
				return nil
			}
			tw := newTable(a.stdout)
			fprintln(tw, "RUN\tSTATE\tSTARTED\tUPDATED\tREPLAYED\tREFUSED\tFAILED AGAIN\tRESOLVED\tRATE\tFILTER")
			for _, r := range out {
				fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.ID, r.State, stamp(r.Started), stamp(r.Updated),
					r.Replayed, r.Refused, r.Refailed, r.Resolved, rateText(r.Rate), r.Filter)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	confirmFlags(cmd, "idempotency store URL: confirm every run's pending entries done and mark them resolved")
	cmd.AddCommand(a.runsShowCmd(), a.runsCancelCmd())
	return cmd
}

// runsJSON is the output of runs --json.
type runsJSON struct {
	Runs []runJSON `json:"runs"`
	// Reconciled is set when --store confirmed resolutions.
	Reconciled *reconcileJSON `json:"reconciled,omitempty"`
}

// confirmFlags registers the store flags of a command that confirms
// replayed entries done in the store, with usage as --store's help.
func confirmFlags(cmd *cobra.Command, usage string) {
	storeFlags(cmd)
	cmd.Flags().Lookup("store").Usage = usage + " (env SURELY_STORE_URL)"
}

// reconcileRuns reads, in the store of --store, the records of the
// entries every replay run replayed whose outcome is not known yet, and
// marks resolved those whose operation completed (replay.Reconcile, run by
// run). Runs that replayed nothing are skipped.
func (a *app) reconcileRuns(cmd *cobra.Command, ar *archiveConn) (*reconcileJSON, error) {
	st, err := a.openStore(cmd)
	if err != nil {
		return nil, err
	}
	defer st.close()
	ctx := cmd.Context()
	runs, err := ar.ListReplays(ctx)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	rec := &reconcileJSON{}
	for _, r := range runs {
		if r.Replayed == 0 {
			continue
		}
		sum, err := replay.Reconcile(ctx, ar, st.Store, r.ID)
		rec.Resolved += sum.Resolved
		rec.Pending += sum.Pending
		if err != nil {
			return nil, fmt.Errorf("check run %s in the store: %w", r.ID, err)
		}
	}
	return rec, nil
}

func rateText(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/s", r)
}

// outcomeOf is what became of an entry run replayed; failedAgain: its
// failed-again link names a dead letter of run.
func outcomeOf(e archive.Entry, run string, failedAgain bool) string {
	switch {
	case len(e.ReplayedBy) > 0 && e.ReplayedBy[len(e.ReplayedBy)-1] != run:
		return "replayed again by " + e.ReplayedBy[len(e.ReplayedBy)-1]
	case e.State == archive.StateReplayed && failedAgain:
		return "failed_again"
	case e.State == archive.StateReplayed:
		return "pending"
	}
	return string(e.State)
}

func (a *app) runsShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "Show one replay run and what became of the entries it replayed",
		Long: `show prints one replay run (its state, counts, rate, filter) and every
entry it replayed with its outcome: resolved (the operation completed),
failed_again (with the ID of the new dead letter, an open entry), pending
(not known yet) or the state an operator gave it since.

With --store, it first reads the dedup records of the pending entries (in
one round trip per namespace where the store allows) and marks resolved
those whose operation completed: run it once the consumer had time to
process the replayed messages.`,
		Example: `  surely dlq runs show 0b8f1c3e-7d2a-4f4b-9c1d-2e3f4a5b6c7d
  surely dlq runs show 0b8f1c3e-7d2a-4f4b-9c1d-2e3f4a5b6c7d --store postgres://... --json`,
		Args: exactArgs(1, "one replay run ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ar, err := a.openRunArchive(cmd, id)
			if err != nil {
				return err
			}
			defer ar.close()
			ctx := cmd.Context()
			var rec *reconcileJSON
			if flagValue(cmd, "store") != "" {
				st, err := a.openStore(cmd)
				if err != nil {
					return err
				}
				defer st.close()
				sum, err := replay.Reconcile(ctx, ar, st.Store, id)
				if err != nil {
					return err
				}
				rec = &reconcileJSON{Resolved: sum.Resolved, Pending: sum.Pending}
			}
			run, err := ar.LoadReplay(ctx, id)
			if err != nil {
				return fmt.Errorf("replay run %s: %w", id, err)
			}
			out := runShowJSON{runJSON: toRunJSON(run), Reconciled: rec, Entries: []runEntryJSON{}}
			var after int64
			for {
				page, err := ar.List(ctx, archive.Filter{ReplayedBy: id}, archive.Page{After: after, Limit: 500, OmitPayload: true})
				if err != nil {
					return fmt.Errorf("list the run's entries: %w", err)
				}
				for _, e := range page {
					again := ""
					if e.FailedAgainAs != "" {
						d, err := ar.Get(ctx, e.FailedAgainAs)
						if err == nil && d.Message != nil && d.Message.Metadata.Get(dlq.KeyReplayID) == id {
							again = e.FailedAgainAs
						}
					}
					out.Entries = append(out.Entries, runEntryJSON{ID: e.ID, Seq: e.Seq, Key: e.OperationKey, Topic: e.OriginalTopic,
						Outcome: outcomeOf(e, id, again != ""), FailedAgainAs: again})
				}
				if len(page) < 500 {
					break
				}
				after = page[len(page)-1].Seq
			}
			if asJSON {
				return writeJSON(a.stdout, out)
			}
			return printRun(a, out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	confirmFlags(cmd, "idempotency store URL: confirm the pending entries' operations done and mark them resolved")
	return cmd
}

func printRun(a *app, r runShowJSON) error {
	w := a.stdout
	tw := newTable(w)
	row := func(k, v string) { fprintf(tw, "%s\t%s\n", k, orDash(v)) }
	row("run:", r.ID)
	row("state:", r.State)
	row("started:", stamp(r.Started))
	row("updated:", stamp(r.Updated))
	row("filter:", r.Filter)
	row("target:", r.Target)
	row("counts:", fmt.Sprintf("replayed %d, refused %d, failed again %d, resolved %d", r.Replayed, r.Refused, r.Refailed, r.Resolved))
	row("rate:", rateText(r.Rate))
	row("cursor:", fmt.Sprint(r.Cursor))
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Reconciled != nil {
		fprintf(w, "\nchecked in the store: %d resolved now, %d still pending\n", r.Reconciled.Resolved, r.Reconciled.Pending)
	}
	fprintf(w, "\nentries (%d):\n", len(r.Entries))
	if len(r.Entries) == 0 {
		return nil
	}
	tw = newTable(w)
	fprintln(tw, "  SEQ\tID\tOUTCOME\tTOPIC\tKEY\tFAILED AGAIN AS")
	for _, e := range r.Entries {
		fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, shortID(e.ID), e.Outcome, orDash(e.Topic), orDash(clip(e.Key, 32)), orDash(shortID(e.FailedAgainAs)))
	}
	return tw.Flush()
}

func (a *app) runsCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a replay run (a running one stops at its next message)",
		Long: `cancel marks a replay run canceled. A replay running it (in any process)
stops at its next message, saves its cursor and exits with status 130;
"surely dlq replay --resume RUN" continues it later. A run that is done
cannot be canceled.`,
		Example: `  surely dlq runs cancel 0b8f1c3e-7d2a-4f4b-9c1d-2e3f4a5b6c7d`,
		Args:    exactArgs(1, "one replay run ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ar, err := a.openRunArchive(cmd, id)
			if err != nil {
				return err
			}
			defer ar.close()
			run, err := runcancel.Cancel(cmd.Context(), ar, id, a.now())
			switch {
			case errors.Is(err, runcancel.ErrDone):
				return withCode(exitRefused, err)
			case err != nil:
				return err
			case run.State == archive.RunCanceled:
				fprintf(a.stdout, "replay run %s was already canceled\n", id)
				return nil
			}
			was := run.State
			fprintf(a.stdout, "replay run %s canceled (was %s)", id, was)
			if was == archive.RunRunning {
				fprintf(a.stdout, ": the replay running it stops at its next message")
			}
			fprintf(a.stdout, "\ncontinue it with: surely dlq replay --resume %s\n", id)
			return nil
		},
	}
}

// openRunArchive checks a run ID given as argument and opens the archive.
func (a *app) openRunArchive(cmd *cobra.Command, id string) (*archiveConn, error) {
	if err := idem.ValidateKey(id); err != nil {
		return nil, usageErr("run %q: %w", id, err)
	}
	return a.openArchive(cmd)
}
