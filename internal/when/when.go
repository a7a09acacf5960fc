// Package when reads the points in time an operator types to select dead
// letters (the CLI's --older-than and --newer-than, the console's from
// and to): an age back from now ("30m", "1h", "2d", "1d12h"), a day
// ("today", "yesterday", "2026-12-01"), or a time (UTC
// "2026-12-01T15:04", or RFC 3339). One parser, so the two read the same
// words the same way; both pass their own clock.
package when

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Forms names the accepted forms, for error messages and help.
const Forms = "an age back from now (30m, 1h, 2d, 1d12h), today, yesterday, a UTC date or time (2026-12-01, 2026-12-01T15:04) or RFC 3339"

// layouts are the absolute forms; all but RFC 3339 are read in UTC.
var layouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// Parse reads s as a point in time, relative forms counted back from now:
// an age is now minus that age, "now" is now, "today" is the start of
// now's UTC day and "yesterday" the start of the day before. Surrounding
// spaces are ignored; an empty s is an error.
func Parse(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return time.Time{}, errors.New("empty time")
	case "now":
		return now, nil
	case "today":
		return startOfDay(now), nil
	case "yesterday":
		return startOfDay(now).AddDate(0, 0, -1), nil
	}
	for _, layout := range layouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	d, err := Age(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time: want %s", s, Forms)
	}
	return now.Add(-d), nil
}

func startOfDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// Age is time.ParseDuration with a leading whole number of days ("7d",
// "1d12h") allowed. Negative ages are refused.
func Age(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty age")
	}
	bad := fmt.Errorf("%q is not an age (90m, 2h, 7d)", s)
	var days time.Duration
	rest := s
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > 1e6 {
			return 0, bad
		}
		days, rest = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil || d < 0 {
			return 0, bad
		}
	}
	return days + d, nil
}
