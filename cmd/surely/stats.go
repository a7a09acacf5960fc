package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

type statsJSON struct {
	Total       int            `json:"total"`
	Oldest      *time.Time     `json:"oldest,omitempty"`
	OldestAge   string         `json:"oldest_age,omitempty"`
	Newest      *time.Time     `json:"newest,omitempty"`
	NewestAge   string         `json:"newest_age,omitempty"`
	ByReason    map[string]int `json:"by_reason"`
	ByTopic     map[string]int `json:"by_topic"`
	ByHandler   map[string]int `json:"by_handler"`
	ByErrorType map[string]int `json:"by_error_type"`
	// State is the --state the counts are of ("all" for every state).
	State   string         `json:"state"`
	ByState map[string]int `json:"by_state"`
}

func (a *app) statsCmd() *cobra.Command {
	var (
		ff     filterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count dead letters by reason, topic, handler and error type",
		Long: `stats counts the archived dead letters (the open ones, or those the filters
and --state select) by reason, original topic, handler and root error
type, and shows the oldest and newest dead-lettering times. Start here
after an alert. An entry leaves the open count when a replay republished
it, or a purge discarded it; --state all counts every state.`,
		Example: `  surely dlq stats
  surely dlq stats --state resolved
  surely dlq stats --topic orders --newer-than 1h --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := a.now()
			f, err := ff.filter(now)
			if err != nil {
				return err
			}
			ar, err := a.openArchive(cmd)
			if err != nil {
				return err
			}
			defer ar.close()
			st, err := ar.Stats(cmd.Context(), f)
			if err != nil {
				return fmt.Errorf("stats: %w", err)
			}
			if asJSON {
				out := statsJSON{
					Total: st.Total, ByReason: st.ByReason, ByTopic: st.ByTopic,
					ByHandler: st.ByHandler, ByErrorType: st.ByErrorType, State: ff.state, ByState: st.ByState,
				}
				if st.Total > 0 {
					oldest, newest := st.Oldest.UTC(), st.Newest.UTC()
					out.Oldest, out.Newest = &oldest, &newest
					out.OldestAge, out.NewestAge = ageJSON(now.Sub(oldest)), ageJSON(now.Sub(newest))
				}
				return writeJSON(a.stdout, out)
			}
			w := a.stdout
			fprintf(w, "dead letters: %d (%s)\n", st.Total, ff.state)
			if st.Total == 0 {
				return nil
			}
			fprintf(w, "oldest:       %s (%s ago)\n", stamp(st.Oldest), age(now.Sub(st.Oldest)))
			fprintf(w, "newest:       %s (%s ago)\n", stamp(st.Newest), age(now.Sub(st.Newest)))
			for _, g := range []struct {
				title string
				m     map[string]int
			}{{"state", st.ByState}, {"reason", st.ByReason}, {"topic", st.ByTopic}, {"handler", st.ByHandler}, {"error type", st.ByErrorType}} {
				fprintf(w, "\nby %s:\n", g.title)
				tw := newTable(w)
				for _, c := range byCount(g.m) {
					fprintf(tw, "  %s\t%d\n", orDash(c.Name), c.Count)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	ff.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
