package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/dlq/archive"
)

type purgeJSON struct {
	DryRun bool `json:"dry_run"`
	// Removed counts the entries discarded (or, with --hard, deleted).
	Removed int         `json:"removed"`
	Hard    bool        `json:"hard,omitempty"`
	Why     string      `json:"why,omitempty"`
	Entries []entryJSON `json:"entries"`
}

// purgeBatch is how many entries one Delete call removes.
const purgeBatch = 500

// purgeFlags are the flags of purge.
type purgeFlags struct {
	ff                     filterFlags
	yes, all, asJSON, hard bool
	why                    string
}

func (a *app) purgeCmd() *cobra.Command {
	var pf purgeFlags
	cmd := &cobra.Command{
		Use:   "purge [ID|SEQ...]",
		Short: "Discard dead letters, with a reason (needs --yes)",
		Long: `purge discards the archived dead letters that the filters (the open ones
unless --state says otherwise) or the IDs given as arguments (full, the
start ls prints, or SEQ numbers; in any state) select, and prints each one.
A discarded entry leaves the open count and is kept as a tombstone with
its reason (--why) until the archive's retention prunes it; --hard deletes
for good instead. Without --yes it changes nothing: it prints what it
would remove and exits with status 4. With no filter and no ID it refuses
unless --all is given.

Replay what should be replayed first.`,
		Example: `  surely dlq purge --topic orders --older-than 7d          # shows what would go
  surely dlq purge --topic orders --older-than 7d --why "orders cancelled by the shop" --yes
  surely dlq purge 0b8f1c3e --why "duplicate of order 42" --yes
  surely dlq purge 0b8f1c3e --hard --yes                   # gone for good`,
		RunE: func(cmd *cobra.Command, args []string) error { return a.runPurge(cmd, &pf, args) },
	}
	pf.ff.register(cmd)
	cmd.Flags().BoolVar(&pf.yes, "yes", false, "really discard (or delete)")
	cmd.Flags().StringVar(&pf.why, "why", "", "the reason of the discard, kept with the tombstone (needed with --yes)")
	cmd.Flags().BoolVar(&pf.hard, "hard", false, "delete for good instead of discarding (no tombstone)")
	cmd.Flags().BoolVar(&pf.all, "all", false, "allow a purge without any filter or ID: the whole archive")
	cmd.Flags().BoolVar(&pf.asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) runPurge(cmd *cobra.Command, pf *purgeFlags, args []string) error {
	now := a.now()
	f, err := pf.ff.filter(now)
	if err != nil {
		return err
	}
	if err := pf.check(len(args)); err != nil {
		return err
	}
	ar, err := a.openArchive(cmd)
	if err != nil {
		return err
	}
	defer ar.close()
	ctx := cmd.Context()
	if len(args) > 0 {
		if f.IDs, err = resolveRefs(ctx, ar, args); err != nil {
			return err
		}
		if !pf.ff.stateSet() {
			f.States = nil
		}
	}
	out := purgeJSON{DryRun: !pf.yes, Hard: pf.hard, Why: pf.why, Entries: []entryJSON{}}
	tw := newTable(a.stdout)
	if !pf.asJSON {
		fprintf(tw, "%s\tSEQ\tAGE\tREASON\tTOPIC\tKEY\tERROR\n", pf.verb())
	}
	if err := pf.purgePages(ctx, ar, f, now, &out, tw); err != nil {
		return err
	}
	if err := a.printPurge(pf, out, tw); err != nil {
		return err
	}
	if !pf.yes {
		return withCode(exitRefused, fmt.Errorf("purge refused without --yes (%s selected): repeat with --yes", plural(len(out.Entries), "dead letter")))
	}
	return nil
}

// check checks the flags of a purge given nargs IDs.
func (pf *purgeFlags) check(nargs int) error {
	if !pf.ff.any() && nargs == 0 && !pf.all {
		return usageErr("purge needs a filter, IDs, or --all")
	}
	if pf.yes && !pf.hard && strings.TrimSpace(pf.why) == "" {
		return usageErr("purge discards with a reason: give --why REASON (or --hard to delete for good)")
	}
	return nil
}

// purgePages goes through the entries f selects a page at a time: it
// removes each page (with --yes), collects its entries in out and, without
// --json, writes their rows to tw.
func (pf *purgeFlags) purgePages(ctx context.Context, ar *archiveConn, f archive.Filter, now time.Time, out *purgeJSON, tw io.Writer) error {
	var after int64
	for {
		page, err := ar.List(ctx, f, archive.Page{After: after, Limit: purgeBatch, OmitPayload: true})
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].Seq
		if err := pf.remove(ctx, ar, page, out); err != nil {
			return err
		}
		for _, e := range page {
			out.Entries = append(out.Entries, toEntryJSON(e, now))
			if !pf.asJSON {
				fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Seq, age(now.Sub(e.DeadLetteredAt)),
					orDash(string(e.Reason)), orDash(e.OriginalTopic), orDash(clip(e.OperationKey, 32)), orDash(clipCause(e.Error, 60)))
			}
		}
		if len(page) < purgeBatch {
			return nil
		}
	}
}

// verb heads the table of purge: what happens to the entries listed.
func (pf *purgeFlags) verb() string {
	switch {
	case !pf.yes:
		return "WOULD REMOVE"
	case pf.hard:
		return "DELETED"
	}
	return "DISCARDED"
}

// remove discards (or, with --hard, deletes) the entries of one page, with
// --yes; without, it does nothing.
func (pf *purgeFlags) remove(ctx context.Context, ar *archiveConn, page []archive.Entry, out *purgeJSON) error {
	if !pf.yes {
		return nil
	}
	ids := make([]string, len(page))
	for i, e := range page {
		ids[i] = e.ID
	}
	var (
		n   int
		err error
	)
	if pf.hard {
		n, err = ar.Delete(ctx, ids...)
	} else {
		n, err = ar.Mark(ctx, archive.Mark{To: archive.StateDiscarded, Note: pf.why}, ids...)
	}
	if err != nil {
		return fmt.Errorf("purge (removed %d before): %w", out.Removed, err)
	}
	out.Removed += n
	return nil
}

// printPurge prints the result of a purge: JSON, or the table and a line.
func (a *app) printPurge(pf *purgeFlags, out purgeJSON, tw *tabwriter.Writer) error {
	if pf.asJSON {
		return writeJSON(a.stdout, out)
	}
	if len(out.Entries) > 0 {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case pf.yes && pf.hard:
		fprintf(a.stdout, "deleted %s for good\n", plural(out.Removed, "dead letter"))
	case pf.yes:
		fprintf(a.stdout, "discarded %s (kept as tombstones: --state discarded)\n", plural(out.Removed, "dead letter"))
	default:
		fprintf(a.stdout, "%s would be removed; nothing was removed (add --yes)\n", plural(len(out.Entries), "dead letter"))
	}
	return nil
}

// plural is "1 dead letter", "2 dead letters".
func plural(n int, noun string) string {
	return plurals(n, noun, noun+"s")
}

// plurals is plural for a noun whose plural is not noun+"s".
func plurals(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
