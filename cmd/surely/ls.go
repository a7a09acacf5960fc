package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// entryJSON is an archived dead letter in ls --json.
type entryJSON struct {
	ID             string     `json:"id"`
	Seq            int64      `json:"seq"`
	OriginalUUID   string     `json:"original_uuid"`
	Reason         string     `json:"reason"`
	Topic          string     `json:"topic"`
	Handler        string     `json:"handler"`
	ConsumerGroup  string     `json:"consumer_group,omitempty"`
	Namespace      string     `json:"namespace,omitempty"`
	Key            string     `json:"key"`
	Error          string     `json:"error"`
	ErrorTypes     string     `json:"error_types,omitempty"`
	Attempts       int        `json:"attempts"`
	DeadLetteredAt time.Time  `json:"dead_lettered_at"`
	Age            string     `json:"age"`
	ArchivedAt     time.Time  `json:"archived_at"`
	Copies         int        `json:"copies"`
	ReplayedBy     []string   `json:"replayed_by,omitempty"`
	State          string     `json:"state"`
	StateAt        *time.Time `json:"state_at,omitempty"`
	Note           string     `json:"note,omitempty"`
	FailedAgainAs  string     `json:"failed_again_as,omitempty"`
}

func toEntryJSON(e archive.Entry, now time.Time) entryJSON {
	out := entryJSON{
		ID: e.ID, Seq: e.Seq, Reason: string(e.Reason), Topic: e.OriginalTopic,
		Handler: e.Handler, ConsumerGroup: e.ConsumerGroup, Namespace: e.Namespace,
		Key: e.OperationKey, Error: e.Error, ErrorTypes: e.ErrorTypes, Attempts: e.Attempts,
		DeadLetteredAt: e.DeadLetteredAt.UTC(), Age: ageJSON(now.Sub(e.DeadLetteredAt)),
		ArchivedAt: e.ArchivedAt.UTC(), Copies: e.Copies, ReplayedBy: e.ReplayedBy,
		State: string(e.State), Note: e.Note, FailedAgainAs: e.FailedAgainAs,
	}
	if out.State == "" {
		out.State = string(archive.StateOpen)
	}
	if !e.StateAt.IsZero() {
		t := e.StateAt.UTC()
		out.StateAt = &t
	}
	if e.Message != nil {
		out.OriginalUUID = e.Message.Metadata.Get(dlq.KeyOriginalUUID)
	}
	return out
}

type lsJSON struct {
	Entries []entryJSON `json:"entries"`
	// Next is the --after cursor of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

func (a *app) lsCmd() *cobra.Command {
	var (
		ff     filterFlags
		asJSON bool
		limit  int
		after  string
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, oldest first, one page at a time",
		Long: `ls lists the archived dead letters the filters select, in archive order
(oldest first), at most --limit per page: the open ones unless --state
says otherwise. When more follow, it prints the cursor of the next page:
pass it to --after. ID is the start of the entry's ID: show, replay and
purge take it, as they take the SEQ number and the full ID (in --json).
REPLAYS counts the replay runs that republished an entry (their IDs are in
show and --json).`,
		Example: `  surely dlq ls --reason exhausted --topic orders
  surely dlq ls --state resolved
  surely dlq ls --error "connection refused" --older-than 2h --limit 20
  surely dlq ls --after 120 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := a.now()
			f, err := ff.filter(now)
			if err != nil {
				return err
			}
			if limit < 1 || limit > 10000 {
				return usageErr("--limit %d: want 1..10000", limit)
			}
			var cursor int64
			if after != "" {
				if cursor, err = strconv.ParseInt(after, 10, 64); err != nil || cursor < 0 {
					return usageErr("--after %q: want the cursor printed by a previous ls", after)
				}
			}
			ar, err := a.openArchive(cmd)
			if err != nil {
				return err
			}
			defer ar.close()
			// One more than asked tells whether a next page exists.
			entries, err := ar.List(cmd.Context(), f, archive.Page{After: cursor, Limit: limit + 1, OmitPayload: true})
			if err != nil {
				return fmt.Errorf("list: %w", err)
			}
			next := ""
			if len(entries) > limit {
				entries = entries[:limit]
				next = strconv.FormatInt(entries[limit-1].Seq, 10)
			}
			if asJSON {
				out := lsJSON{Entries: make([]entryJSON, 0, len(entries)), Next: next}
				for _, e := range entries {
					out.Entries = append(out.Entries, toEntryJSON(e, now))
				}
				return writeJSON(a.stdout, out)
			}
			if len(entries) == 0 {
				fprintf(a.stdout, "no dead letters (%s)\n", ff.state)
				return nil
			}
			tw := newTable(a.stdout)
			fprintln(tw, "SEQ\tID\tSTATE\tAGE\tREASON\tTOPIC\tHANDLER\tKEY\tATTEMPTS\tREPLAYS\tERROR")
			for _, e := range entries {
				fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
					e.Seq, shortID(e.ID), stateOf(e), age(now.Sub(e.DeadLetteredAt)), orDash(string(e.Reason)),
					orDash(e.OriginalTopic), orDash(e.Handler), orDash(clip(e.OperationKey, 32)),
					e.Attempts, len(e.ReplayedBy), orDash(clipCause(e.Error, 80)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fprintf(a.stdout, "\nmore: repeat with --after %s\n", next)
			}
			return nil
		},
	}
	ff.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many entries (1..10000)")
	cmd.Flags().StringVar(&after, "after", "", "cursor: list the entries after this one (printed by the previous page)")
	return cmd
}

// stateOf is the state ls prints: failed again is told apart from a
// replay whose outcome is not known yet.
func stateOf(e archive.Entry) string {
	switch {
	case e.State == "":
		return string(archive.StateOpen)
	case e.State == archive.StateReplayed && e.FailedAgainAs != "":
		return "replayed, failed again"
	}
	return string(e.State)
}
