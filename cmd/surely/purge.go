package main

import (
	"fmt"
	"strings"

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

func (a *app) purgeCmd() *cobra.Command {
	var (
		ff     filterFlags
		yes    bool
		all    bool
		asJSON bool
		hard   bool
		why    string
	)
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
		RunE: func(cmd *cobra.Command, args []string) error {
			now := a.now()
			f, err := ff.filter(now)
			if err != nil {
				return err
			}
			if !ff.any() && len(args) == 0 && !all {
				return usageErr("purge needs a filter, IDs, or --all")
			}
			if yes && !hard && strings.TrimSpace(why) == "" {
				return usageErr("purge discards with a reason: give --why REASON (or --hard to delete for good)")
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
				if !ff.stateSet() {
					f.States = nil
				}
			}
			out := purgeJSON{DryRun: !yes, Hard: hard, Why: why, Entries: []entryJSON{}}
			tw := newTable(a.stdout)
			if !asJSON {
				verb := "DISCARDED"
				switch {
				case !yes:
					verb = "WOULD REMOVE"
				case hard:
					verb = "DELETED"
				}
				fprintf(tw, "%s\tSEQ\tAGE\tREASON\tTOPIC\tKEY\tERROR\n", verb)
			}
			var after int64
			for {
				page, err := ar.List(ctx, f, archive.Page{After: after, Limit: purgeBatch, OmitPayload: true})
				if err != nil {
					return fmt.Errorf("list: %w", err)
				}
				if len(page) == 0 {
					break
				}
				after = page[len(page)-1].Seq
				if yes {
					ids := make([]string, len(page))
					for i, e := range page {
						ids[i] = e.ID
					}
					var n int
					if hard {
						n, err = ar.Delete(ctx, ids...)
					} else {
						n, err = ar.Mark(ctx, archive.Mark{To: archive.StateDiscarded, Note: why}, ids...)
					}
					if err != nil {
						return fmt.Errorf("purge (removed %d before): %w", out.Removed, err)
					}
					out.Removed += n
				}
				for _, e := range page {
					out.Entries = append(out.Entries, toEntryJSON(e, now))
					if !asJSON {
						fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Seq, age(now.Sub(e.DeadLetteredAt)),
							orDash(string(e.Reason)), orDash(e.OriginalTopic), orDash(clip(e.OperationKey, 32)), orDash(clipCause(e.Error, 60)))
					}
				}
				if len(page) < purgeBatch {
					break
				}
			}
			if asJSON {
				if err := writeJSON(a.stdout, out); err != nil {
					return err
				}
			} else {
				if len(out.Entries) > 0 {
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				switch {
				case yes && hard:
					fprintf(a.stdout, "deleted %s for good\n", plural(out.Removed, "dead letter"))
				case yes:
					fprintf(a.stdout, "discarded %s (kept as tombstones: --state discarded)\n", plural(out.Removed, "dead letter"))
				default:
					fprintf(a.stdout, "%s would be removed; nothing was removed (add --yes)\n", plural(len(out.Entries), "dead letter"))
				}
			}
			if !yes {
				return withCode(exitRefused, fmt.Errorf("purge refused without --yes (%s selected): repeat with --yes", plural(len(out.Entries), "dead letter")))
			}
			return nil
		},
	}
	ff.register(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "really discard (or delete)")
	cmd.Flags().StringVar(&why, "why", "", "the reason of the discard, kept with the tombstone (needed with --yes)")
	cmd.Flags().BoolVar(&hard, "hard", false, "delete for good instead of discarding (no tombstone)")
	cmd.Flags().BoolVar(&all, "all", false, "allow a purge without any filter or ID: the whole archive")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
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
