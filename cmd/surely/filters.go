package main

import (
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/when"
)

// filterFlags are the selection flags shared by ls, stats, replay and purge.
type filterFlags struct {
	reason, topic, handler, errText, key string
	search                               string
	errType                              string
	olderThan, newerThan                 string
	replayID                             string
	state                                string
	flags                                *pflag.FlagSet
}

func (f *filterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.reason, "reason", "", "only this reason: exhausted, permanent, conflict, no_key, lease_lost, panic, decode")
	fl.StringVar(&f.topic, "topic", "", "only dead letters of this original topic")
	fl.StringVar(&f.handler, "handler", "", "only dead letters of this handler")
	fl.StringVar(&f.errText, "error", "", "only dead letters whose error text contains this substring")
	fl.StringVar(&f.search, "search", "", "only dead letters whose operation key or error text contains this substring")
	fl.StringVar(&f.errType, "error-type", "", "only dead letters whose root cause has this type (the ERROR TYPE of stats, e.g. *net.OpError)")
	fl.StringVar(&f.key, "key", "", "only dead letters of this operation key")
	fl.StringVar(&f.olderThan, "older-than", "", "only dead letters older than this: an age (90m, 7d), today, yesterday, a UTC date or time (2026-12-01[T15:04]), RFC 3339")
	fl.StringVar(&f.newerThan, "newer-than", "", "only dead letters newer than this: an age (90m, 7d), today, yesterday, a UTC date or time (2026-12-01[T15:04]), RFC 3339")
	fl.StringVar(&f.replayID, "replay-id", "", "only dead letters of messages this replay run republished that failed again")
	fl.StringVar(&f.state, "state", "open", "only dead letters in this state: open, replayed, resolved, discarded, all")
	f.flags = fl
}

// stateSet reports whether --state was given (by flag or environment).
func (f *filterFlags) stateSet() bool {
	return f.flags != nil && f.flags.Changed("state")
}

// any reports whether a selection flag is set.
func (f *filterFlags) any() bool {
	return f.reason != "" || f.topic != "" || f.handler != "" || f.errText != "" || f.search != "" || f.errType != "" || f.key != "" ||
		f.olderThan != "" || f.newerThan != "" || f.replayID != "" || f.stateSet()
}

// narrows reports whether a selection flag selects less than every
// entry of a state: any but --state, or --state naming a state other than
// open (the default).
func (f *filterFlags) narrows() bool {
	return f.reason != "" || f.topic != "" || f.handler != "" || f.errText != "" || f.search != "" || f.errType != "" || f.key != "" ||
		f.olderThan != "" || f.newerThan != "" || f.replayID != "" || (f.state != "all" && f.state != string(archive.StateOpen))
}

// stateWord names the state --state selects, for messages: "open", or
// "archived" for all.
func (f *filterFlags) stateWord() string {
	if f.state == "all" {
		return "archived"
	}
	return f.state
}

// entryStates are the values of --state but "all".
var entryStates = []archive.State{archive.StateOpen, archive.StateReplayed, archive.StateResolved, archive.StateDiscarded}

// states reads --state: nil for "all".
func (f *filterFlags) states() ([]archive.State, error) {
	if f.state == "all" {
		return nil, nil
	}
	for _, s := range entryStates {
		if string(s) == f.state {
			return []archive.State{s}, nil
		}
	}
	return nil, usageErr("--state %q: want open, replayed, resolved, discarded or all", f.state)
}

var reasons = []dlq.Reason{
	dlq.ReasonExhausted, dlq.ReasonPermanent, dlq.ReasonConflict, dlq.ReasonNoKey,
	dlq.ReasonLeaseLost, dlq.ReasonPanic, dlq.ReasonDecode,
}

// filter builds the archive filter; ages count back from now.
func (f *filterFlags) filter(now time.Time) (archive.Filter, error) {
	out := archive.Filter{
		Reason: dlq.Reason(f.reason), Topic: f.topic, Handler: f.handler,
		ErrorContains: f.errText, Search: f.search, ErrorType: f.errType, Key: f.key, ReplayID: f.replayID,
	}
	states, err := f.states()
	if err != nil {
		return out, err
	}
	out.States = states
	if f.reason != "" {
		known := false
		for _, r := range reasons {
			known = known || r == out.Reason
		}
		if !known {
			return out, usageErr("--reason %q: want one of %v", f.reason, reasons)
		}
	}
	if f.olderThan != "" {
		if out.DeadLetteredBefore, err = pointInTime(f.olderThan, now); err != nil {
			return out, usageErr("--older-than: %w", err)
		}
	}
	if f.newerThan != "" {
		if out.DeadLetteredAfter, err = pointInTime(f.newerThan, now); err != nil {
			return out, usageErr("--newer-than: %w", err)
		}
	}
	if !out.DeadLetteredBefore.IsZero() && !out.DeadLetteredAfter.IsZero() && !out.DeadLetteredAfter.Before(out.DeadLetteredBefore) {
		return out, usageErr("--newer-than %s and --older-than %s select nothing", f.newerThan, f.olderThan)
	}
	return out, nil
}

// pointInTime reads an age back from now ("90m", "7d"), today,
// yesterday, a UTC date or time, or an RFC 3339 time (when.Parse: the
// console's from and to read the same).
func pointInTime(s string, now time.Time) (time.Time, error) { return when.Parse(s, now) }

// parseAge is when.Age: time.ParseDuration with a leading whole number of
// days ("7d", "1d12h") allowed; negative ages refused.
func parseAge(s string) (time.Duration, error) { return when.Age(s) }
