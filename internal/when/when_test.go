package when_test

import (
	"strings"
	"testing"
	"time"

	"github.com/surely-dev/surely/internal/when"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 4, 15, 30, 0, 0, time.UTC)
	for s, want := range map[string]time.Time{
		"30m":                  now.Add(-30 * time.Minute),
		"1h":                   now.Add(-time.Hour),
		"2d":                   now.Add(-48 * time.Hour),
		"1d12h":                now.Add(-36 * time.Hour),
		"now":                  now,
		"today":                time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		" Yesterday ":          time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
		"2026-12-01":           time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		"2026-12-01T15:04":     time.Date(2026, 12, 1, 15, 4, 0, 0, time.UTC),
		"2026-12-01T15:04:05":  time.Date(2026, 12, 1, 15, 4, 5, 0, time.UTC),
		"2026-12-01T15:04:05Z": time.Date(2026, 12, 1, 15, 4, 5, 0, time.UTC),
	} {
		got, err := when.Parse(s, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "soon", "-1h", "xd", "-2d", "2026-13-01", "1d-1h"} {
		if _, err := when.Parse(s, now); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		} else if s != "" && !strings.Contains(err.Error(), "yesterday") {
			t.Errorf("Parse(%q): %v does not say the accepted forms", s, err)
		}
	}
}
