// Package errtext shortens a dead letter's error text for a list (the
// CLI's ls and purge, the console's list) without losing its root cause.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// lastAttempt separates an exhausted budget's summary from the last
// attempt's error in a dead letter's error text.
const lastAttempt = "; last attempt failed: "

// Cause is the part of a dead letter's error that names its cause: after
// an exhausted budget's "...; last attempt failed: ", the last attempt's
// error (a list's reason column already says "exhausted"); else s.
func Cause(s string) string {
	if i := strings.LastIndex(s, lastAttempt); i >= 0 {
		return s[i+len(lastAttempt):]
	}
	return s
}

// Clip is Cause on one line, at most n runes: a longer one keeps its end,
// where a wrapped error's root cause is ("charge order-1: dial tcp ...:
// connection refused"), and marks the cut with a leading "…".
func Clip(s string, n int) string {
	s = strings.Join(strings.Fields(Cause(s)), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return "…" + string(r[len(r)-n+1:])
}
