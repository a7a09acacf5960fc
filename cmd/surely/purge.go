package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/dlq/archive"
)

type purgeJSON struct {
	DryRun  bool        `json:"dry_run"`
	Removed int         `json:"removed"`
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
	)
	cmd := &cobra.Command{
		Use:   "purge [ID...]",
		Short: "Delete dead letters from the archive (needs --yes)",
		Long: `purge deletes the archived dead letters that the filters (or the IDs given
as arguments) select, and prints each one it removed. Without --yes it
removes nothing: it prints what it would remove and exits with status 4.
With no filter and no ID it refuses unless --all is given.

A purged dead letter is gone: replay what should be replayed first.`,
		Example: `  surely dlq purge --topic orders --older-than 7d          # shows what would go
  surely dlq purge --topic orders --older-than 7d --yes
  surely dlq purge 0b8f1c3e-7d2a-5f4b-9c1d-2e3f4a5b6c7d --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			now := a.now()
			f, err := ff.filter(now)
			if err != nil {
				return err
			}
			f.IDs = args
			if !ff.any() && len(args) == 0 && !all {
				return usageErr("purge needs a filter, IDs, or --all")
			}
			ar, err := a.openArchive(cmd)
			if err != nil {
				return err
			}
			defer ar.close()
			ctx := cmd.Context()
			out := purgeJSON{DryRun: !yes, Entries: []entryJSON{}}
			tw := newTable(a.stdout)
			if !asJSON {
				verb := "REMOVED"
				if !yes {
					verb = "WOULD REMOVE"
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
					n, err := ar.Delete(ctx, ids...)
					if err != nil {
						return fmt.Errorf("delete (removed %d before): %w", out.Removed, err)
					}
					out.Removed += n
				}
				for _, e := range page {
					out.Entries = append(out.Entries, toEntryJSON(e, now))
					if !asJSON {
						fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Seq, age(now.Sub(e.DeadLetteredAt)),
							orDash(string(e.Reason)), orDash(e.OriginalTopic), orDash(clip(e.OperationKey, 32)), orDash(clip(e.Error, 50)))
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
				if yes {
					fprintf(a.stdout, "removed %d dead letters\n", out.Removed)
				} else {
					fprintf(a.stdout, "%d dead letters would be removed; nothing was removed (add --yes)\n", len(out.Entries))
				}
			}
			if !yes {
				return withCode(exitRefused, fmt.Errorf("purge refused without --yes (%d dead letters selected)", len(out.Entries)))
			}
			return nil
		},
	}
	ff.register(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "really delete")
	cmd.Flags().BoolVar(&all, "all", false, "allow a purge without any filter or ID: the whole archive")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
