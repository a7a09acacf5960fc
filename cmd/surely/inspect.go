package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/surely-dev/surely/internal/defaults"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

// recordJSON is a store record in inspect --json.
type recordJSON struct {
	Namespace   string `json:"namespace"`
	Key         string `json:"key"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	Canceled    int    `json:"canceled"`
	Charged     int    `json:"charged"`
	Fingerprint string `json:"fingerprint"`
	LeaseToken  string `json:"lease_token"`
	// LeaseUntil is set while the record is in progress.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// LeaseOwner is the trace ID of the attempt that holds the lease, and
	// LeaseProcess the process that runs it (its owner, "host/pid").
	LeaseOwner   string                      `json:"lease_owner_trace_id,omitempty"`
	LeaseProcess string                      `json:"lease_owner_process,omitempty"`
	ExpiresAt    *time.Time                  `json:"expires_at,omitempty"`
	Outcome      []outcomeMessageJSON        `json:"outcome,omitempty"`
	Ledger       []idempotency.AttemptRecord `json:"ledger"`
}

type outcomeMessageJSON struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  payloadView       `json:"payload"`
}

func toRecordJSON(r idempotency.Record) recordJSON {
	out := recordJSON{
		Namespace: r.Namespace, Key: r.Key, State: string(r.State), Attempts: r.Attempts,
		Canceled: r.Canceled, Charged: r.Attempts - r.Canceled, Fingerprint: r.Fingerprint,
		LeaseToken: r.Token, Ledger: r.History,
	}
	if out.Ledger == nil {
		out.Ledger = []idempotency.AttemptRecord{}
	}
	if !r.LeaseUntil.IsZero() {
		t := r.LeaseUntil.UTC()
		out.LeaseUntil = &t
	}
	if !r.ExpiresAt.IsZero() {
		t := r.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	if r.State == idempotency.StateInProgress {
		for i := len(r.History) - 1; i >= 0; i-- {
			if r.History[i].Result == idempotency.ResultInProgress {
				out.LeaseOwner, out.LeaseProcess = r.History[i].TraceID, r.History[i].Owner
				break
			}
		}
	}
	if r.Outcome != nil {
		for _, m := range r.Outcome.Messages {
			out.Outcome = append(out.Outcome, outcomeMessageJSON{UUID: m.UUID, Metadata: m.Metadata, Payload: viewPayload(m.Payload)})
		}
	}
	return out
}

func (a *app) inspectCmd() *cobra.Command {
	var (
		namespace string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "inspect KEY [--namespace NS]",
		Short: "Show the dedup store's record of one operation and its attempt ledger",
		Long: `inspect reads the record of one operation from the idempotency store: its
state, attempts (and those refunded by a canceled shutdown), the lease token
and expiry, the payload fingerprint, the outcome (messages the handler
produced) and the attempt ledger, with the process ("host/pid") and the
trace and span ID of every attempt so a redelivery chain can be followed
across consumers. The namespace is the handler's (handler.WithStore); a
dead letter carries it (surely dlq show).

Without --namespace, inspect looks the key up in every namespace and shows
each record it finds (--json then prints a list). On SQL this is one index
lookup per namespace; on Redis a SCAN of the store's keys (bounded COUNT
per call, never KEYS), slower on a large keyspace: give --namespace when
you know it.

` + storeURLHelp,
		Example: `  surely inspect order-42 --namespace charge-payments --store redis://localhost:6379/0
  SURELY_STORE_URL=sqlite:./app.db surely inspect order-42 --json`,
		Args: exactArgs(1, "one operation key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if namespace != "" {
				if err := idem.ValidateNamespace(namespace); err != nil {
					return usageErr("--namespace: %w", err)
				}
			}
			st, err := a.openStore(cmd)
			if err != nil {
				return err
			}
			defer st.close()
			if namespace == "" {
				return a.inspectEveryNamespace(cmd.Context(), st.Store, args[0], asJSON)
			}
			r, err := st.Get(cmd.Context(), namespace, args[0])
			if err != nil {
				return fmt.Errorf("operation %q in namespace %q: %w", args[0], namespace, err)
			}
			rec := toRecordJSON(r)
			if asJSON {
				return writeJSON(a.stdout, rec)
			}
			return printRecord(a.stdout, rec, a.now())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&namespace, "namespace", "", "dedup namespace of the handler (default: look in every namespace)")
	envFlag(cmd, "namespace", "SURELY_NAMESPACE")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	storeFlags(cmd)
	return cmd
}

// inspectEveryNamespace shows the records of key in every namespace of the
// store: found with the store's listing, each read in full with Get.
func (a *app) inspectEveryNamespace(ctx context.Context, st idempotency.Store, key string, asJSON bool) error {
	if err := idem.ValidateKey(key); err != nil {
		return usageErr("operation key: %w", err)
	}
	f := idempotency.ListFilter{Key: key, Limit: defaults.MaxListLimit}
	page, err := listOps(ctx, st, f)
	if err != nil {
		return err
	}
	recs := make([]recordJSON, 0, len(page.Records))
	for _, e := range page.Records {
		r, err := st.Get(ctx, e.Namespace, key)
		if errors.Is(err, idempotency.ErrNotFound) {
			continue // expired since it was listed
		}
		if err != nil {
			return fmt.Errorf("operation %q in namespace %q: %w", key, e.Namespace, err)
		}
		recs = append(recs, toRecordJSON(r))
	}
	slices.SortFunc(recs, func(a, b recordJSON) int { return strings.Compare(a.Namespace, b.Namespace) })
	if len(recs) == 0 {
		return withCode(exitNotFound, fmt.Errorf("operation %q: %w in any namespace (give --namespace to look in one, or check --store)", key, idempotency.ErrNotFound))
	}
	if asJSON {
		return writeJSON(a.stdout, recs)
	}
	if len(recs) > 1 {
		names := make([]string, len(recs))
		for i, r := range recs {
			names[i] = r.Namespace
		}
		fprintf(a.stdout, "operation %q has a record in %d namespaces: %s\n", key, len(recs), strings.Join(names, ", "))
	}
	for i, r := range recs {
		if len(recs) > 1 {
			fprintf(a.stdout, "\n== namespace %s (%d of %d)\n", r.Namespace, i+1, len(recs))
		}
		if err := printRecord(a.stdout, r, a.now()); err != nil {
			return err
		}
	}
	return nil
}

func printRecord(w io.Writer, r recordJSON, now time.Time) error {
	tw := newTable(w)
	row := func(k, v string) { fprintf(tw, "%s\t%s\n", k, orDash(v)) }
	row("namespace:", r.Namespace)
	row("key:", r.Key)
	row("state:", r.State)
	row("attempts:", attemptsText(r))
	row("fingerprint:", r.Fingerprint)
	row("lease token:", r.LeaseToken)
	if r.LeaseUntil != nil {
		if r.LeaseUntil.After(now) {
			row("lease until:", fmt.Sprintf("%s (in %s)", stampMilli(*r.LeaseUntil), age(r.LeaseUntil.Sub(now))))
		} else {
			row("lease until:", fmt.Sprintf("%s (expired %s ago: the owner died or hangs; the next claim takes over)",
				stampMilli(*r.LeaseUntil), age(now.Sub(*r.LeaseUntil))))
		}
		row("lease owner trace:", r.LeaseOwner)
		row("lease process:", r.LeaseProcess)
	}
	if r.ExpiresAt != nil {
		row("expires:", fmt.Sprintf("%s (in %s, retention)", stamp(*r.ExpiresAt), age(r.ExpiresAt.Sub(now))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.State == string(idempotency.StateDone) || len(r.Outcome) > 0 {
		fprintf(w, "\noutcome (messages produced: %d):\n", len(r.Outcome))
		for _, m := range r.Outcome {
			keys := slices.Sorted(maps.Keys(m.Metadata))
			md := make([]string, 0, len(keys))
			for _, k := range keys {
				md = append(md, k+"="+m.Metadata[k])
			}
			fprintf(w, "  %s  %s %s  %s\n", m.UUID, plural(m.Payload.Bytes, "byte"), m.Payload.Encoding, strings.Join(md, " "))
		}
	}
	fprintf(w, "\nattempt ledger (%d):\n", len(r.Ledger))
	if len(r.Ledger) == 0 {
		return nil
	}
	return printLedger(w, r.Ledger)
}

// attemptsText says how many attempts a record counts, and how many of
// them a canceled shutdown refunded: "4 attempts", "5 attempts (2 canceled
// by a shutdown, not counted: 3 count against the budget)".
func attemptsText(r recordJSON) string {
	s := fmt.Sprintf("%d attempts", r.Attempts)
	if r.Attempts == 1 {
		s = "1 attempt"
	}
	if r.Canceled > 0 {
		s += fmt.Sprintf(" (%d canceled by a shutdown, not counted: %d count against the budget)", r.Canceled, r.Charged)
	}
	return s
}

// printLedger prints attempt records as a table, oldest first.
func printLedger(w io.Writer, h []idempotency.AttemptRecord) error {
	tw := newTable(w)
	fprintln(tw, "  ATTEMPT\tSTARTED\tENDED\tRESULT\tREASON\tPROCESS\tTRACE ID\tSPAN ID\tERROR")
	for _, r := range h {
		fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Attempt, stampMilli(r.Started), stampMilli(r.Ended),
			orDash(string(r.Result)), orDash(r.Reason), orDash(clip(r.Owner, 64)), orDash(r.TraceID), orDash(r.SpanID), orDash(clip(r.Error, 200)))
	}
	return tw.Flush()
}
