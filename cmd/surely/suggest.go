package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// unknownSubcommand is the usage error of a command group given a word that
// names none of its commands, with the commands cobra finds close to it
// (a prefix, or within the root's SuggestionsMinimumDistance).
func unknownSubcommand(cmd *cobra.Command, arg string) error {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = cmd.Root().SuggestionsMinimumDistance
	}
	msg := fmt.Sprintf("unknown command %q for %q", arg, cmd.CommandPath())
	if s := cmd.SuggestionsFor(arg); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usageErr("%s", msg)
}
