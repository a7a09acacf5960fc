package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/surely-dev/surely/internal/defaults"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/oplist"
)

// storeFlags registers the flags that choose the idempotency store.
func storeFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.String("store", "", "idempotency store URL: redis://, postgres://, mysql://, sqlite:PATH")
	envFlag(cmd, "store", "SURELY_STORE_URL")
	fl.String("store-prefix", "", `key prefix of the Redis store (default "surely:")`)
	envFlag(cmd, "store-prefix", "SURELY_STORE_PREFIX")
	fl.String("store-table", "", `table of the SQL store (default "surely_inbox")`)
	envFlag(cmd, "store-table", "SURELY_STORE_TABLE")
}

// storeURLHelp is the store part of the help of the commands that read it.
const storeURLHelp = `The store is chosen by --store or SURELY_STORE_URL:

  redis://[user:pass@]host:6379/0     Redis (key prefix: --store-prefix)
  postgres://user@host:5432/db        PostgreSQL (table: --store-table)
  mysql://user:pass@host:3306/db      MySQL or MariaDB (mariadb:// too; or the driver's
                                      DSN: mysql://user:pass@tcp(host:3306)/db)
  sqlite:/path/to/app.db              SQLite (also a bare file path)`

func (a *app) opsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ops",
		Short: "Browse the dedup store's operation records",
		Long: `The ops commands read the idempotency store, where every operation has one
record (in_progress, failed, exhausted or done). They only read: a listing
walks Redis with SCAN and a bounded COUNT (never KEYS) and reads SQL with
plain SELECTs of one page each (no lock, no transaction).

` + storeURLHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.opsLsCmd())
	return cmd
}

// opJSON is one record in ops ls --json.
type opJSON struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	Canceled  int    `json:"canceled"`
	// Updated is the record's last change; Age is how long ago, by the
	// store's clock.
	Updated    *time.Time `json:"updated,omitempty"`
	Age        string     `json:"age,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// LeaseExpired: an in_progress record whose owner died or hangs.
	LeaseExpired bool       `json:"lease_expired,omitempty"`
	NotBefore    *time.Time `json:"not_before,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
}

type opsJSON struct {
	Operations []opJSON `json:"operations"`
	// Next is the --after cursor of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toOpJSON(e idempotency.ListedRecord, now time.Time) opJSON {
	out := opJSON{
		Namespace: e.Namespace, Key: e.Key, State: string(e.State), Attempts: e.Attempts, Canceled: e.Canceled,
		Updated: utcPtr(e.Updated), LeaseUntil: utcPtr(e.LeaseUntil), NotBefore: utcPtr(e.NotBefore),
		ExpiresAt: utcPtr(e.ExpiresAt), LastError: lastError(e.History),
	}
	if !e.Updated.IsZero() {
		out.Age = ageJSON(now.Sub(e.Updated))
	}
	out.LeaseExpired = e.State == idempotency.StateInProgress && !e.LeaseUntil.After(now)
	return out
}

// lastError is the error of the newest attempt that has one.
func lastError(h []idempotency.AttemptRecord) string {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Error != "" {
			return h[i].Error
		}
	}
	return ""
}

// states are the record states --state accepts.
var states = []idempotency.State{idempotency.StateInProgress, idempotency.StateFailed, idempotency.StateExhausted, idempotency.StateDone}

func (a *app) opsLsCmd() *cobra.Command {
	var (
		namespace, state, olderThan, key, after string
		limit                                   int
		asJSON                                  bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List operation records by namespace, state and age",
		Long: `ls lists the records of the idempotency store that the filters select, at
most --limit per page; when more may follow it prints the cursor of the
next page, for --after. Look here when a consumer seems stuck: records
in_progress whose lease expired (the owner died or hangs), failed ones
waiting for a retry, exhausted ones (dead-lettered, waiting for a replay).

AGE is the time since the record last changed, by the store's clock (SQL:
its updated_at column; Redis: the end of its newest attempt). SQL stores
list in (namespace, key) order; Redis in SCAN order, a page ending where a
SCAN call ended, so it may hold a few more than --limit.

` + storeURLHelp,
		Example: `  surely ops ls --state exhausted
  surely ops ls --namespace charge-payments --state in_progress --older-than 10m
  surely ops ls --store postgres://app@db:5432/app --state failed --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := idempotency.ListFilter{Namespace: namespace, Key: key, State: idempotency.State(state), After: after, Limit: limit}
			if err := opsFilterCheck(&f, olderThan); err != nil {
				return err
			}
			st, err := a.openStore(cmd)
			if err != nil {
				return err
			}
			defer st.close()
			page, err := listOps(cmd.Context(), st.Store, f)
			if err != nil {
				return err
			}
			if asJSON {
				out := opsJSON{Operations: make([]opJSON, 0, len(page.Records)), Next: page.Next}
				for _, e := range page.Records {
					out.Operations = append(out.Operations, toOpJSON(e, page.Now))
				}
				return writeJSON(a.stdout, out)
			}
			return printOps(a.stdout, page)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&namespace, "namespace", "", "only records of this namespace (the handler's, handler.WithStore)")
	envFlag(cmd, "namespace", "SURELY_NAMESPACE")
	fl.StringVar(&state, "state", "", "only records in this state: in_progress, failed, exhausted, done")
	fl.StringVar(&olderThan, "older-than", "", "only records that last changed at least this long ago (90s, 10m, 2h, 7d)")
	fl.StringVar(&key, "key", "", "only records of this operation key")
	fl.IntVar(&limit, "limit", defaults.ListLimit, fmt.Sprintf("at most about this many records (1..%d)", defaults.MaxListLimit))
	fl.StringVar(&after, "after", "", "cursor: go on after the previous page (printed by it)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	storeFlags(cmd)
	return cmd
}

// opsFilterCheck validates the flags of f, reading --older-than.
func opsFilterCheck(f *idempotency.ListFilter, olderThan string) error {
	if f.Limit < 1 || f.Limit > defaults.MaxListLimit {
		return usageErr("--limit %d: want 1..%d", f.Limit, defaults.MaxListLimit)
	}
	if f.State != "" {
		known := false
		for _, s := range states {
			known = known || s == f.State
		}
		if !known {
			return usageErr("--state %q: want one of %v", f.State, states)
		}
	}
	if f.Namespace != "" {
		if err := idem.ValidateNamespace(f.Namespace); err != nil {
			return usageErr("--namespace: %w", err)
		}
	}
	if olderThan != "" {
		d, err := parseAge(olderThan)
		if err != nil {
			return usageErr("--older-than: %w", err)
		}
		f.OlderThan = d
	}
	return nil
}

// listOps reads pages until it holds f.Limit records or the listing ends
// (a Redis page may come back short after a bounded SCAN walk).
func listOps(ctx context.Context, st idempotency.Store, f idempotency.ListFilter) (idempotency.ListPage, error) {
	l, ok := st.(idempotency.Lister)
	if !ok {
		return idempotency.ListPage{}, fmt.Errorf("%w: the store (%T) cannot list its records: it is no idempotency.Lister", errors.ErrUnsupported, st)
	}
	var all idempotency.ListPage
	for {
		page, err := l.List(ctx, f)
		if err != nil {
			return idempotency.ListPage{}, withCode(filterCode(err), fmt.Errorf("list: %w", err))
		}
		all.Records = append(all.Records, page.Records...)
		all.Next, all.Now = page.Next, page.Now
		if page.Next == "" || len(all.Records) >= oplist.PageSize(f) {
			return all, nil
		}
		f.After = page.Next
	}
}

// filterCode is the exit status of a listing error: a bad cursor is a
// usage error.
func filterCode(err error) int {
	if errors.Is(err, idempotency.ErrInvalidRequest) {
		return exitUsage
	}
	return exitCode(err)
}

func printOps(w io.Writer, page idempotency.ListPage) error {
	if len(page.Records) == 0 {
		fprintln(w, "no operation records")
		return nil
	}
	tw := newTable(w)
	fprintln(tw, "NAMESPACE\tKEY\tSTATE\tATTEMPTS\tAGE\tLEASE\tLAST ERROR")
	for _, e := range page.Records {
		updated := "-"
		if !e.Updated.IsZero() {
			updated = age(page.Now.Sub(e.Updated))
		}
		fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Namespace, clip(e.Key, 40), e.State, e.Attempts,
			updated, leaseNote(e, page.Now), orDash(clip(lastError(e.History), 80)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fprintf(w, "\nmore: repeat with --after %s\n", page.Next)
	}
	return nil
}

// leaseNote says where the lease of a record stands.
func leaseNote(e idempotency.ListedRecord, now time.Time) string {
	switch {
	case e.State == idempotency.StateInProgress && e.LeaseUntil.After(now):
		return "live, " + age(e.LeaseUntil.Sub(now)) + " left"
	case e.State == idempotency.StateInProgress:
		return "expired " + age(now.Sub(e.LeaseUntil)) + " ago"
	case e.State == idempotency.StateFailed && e.NotBefore.After(now):
		return "retry in " + age(e.NotBefore.Sub(now))
	}
	return "-"
}
