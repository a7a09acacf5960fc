package options

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestPutChecks(t *testing.T) {
	var s Set
	for _, c := range []struct {
		name string
		err  error
		want string // "" for valid
	}{
		{"nil logger", s.PutLogger(errInvalid, nil), "nil logger"},
		{"logger", s.PutLogger(errInvalid, slog.Default()), ""},
		{"nil clock", s.PutClock(errInvalid, nil), "nil clock"},
		{"clock", s.PutClock(errInvalid, time.Now), ""},
		{"zero", s.PutPositive(errInvalid, "WithWait", "wait", 0), "wait must be positive, got 0s"},
		{"positive", s.PutPositive(errInvalid, "WithWait", "wait", time.Nanosecond), ""},
		{"below", s.PutAtLeast(errInvalid, "WithPoll", "poll interval", time.Millisecond-1, time.Millisecond), "poll interval must be at least 1ms, got 999.999µs"},
		{"at least", s.PutAtLeast(errInvalid, "WithPoll", "poll interval", time.Millisecond, time.Millisecond), ""},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: %v, want nil", c.name, c.err)
		case c.want != "" && (!errors.Is(c.err, errInvalid) || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: %v, want an invalid-option error with %q", c.name, c.err, c.want)
		}
	}
	if Get(&s, Logger, (*slog.Logger)(nil)) != slog.Default() || Get(&s, "WithWait", time.Duration(0)) != time.Nanosecond ||
		Get(&s, "WithPoll", time.Duration(0)) != time.Millisecond || !s.Has(Clock) {
		t.Error("the valid values were not recorded")
	}
}
