package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --older-than and --newer-than read the console's words too: today,
// yesterday, a UTC date or time, on the app's clock.
func TestAgeFlagsReadDaysAndDates(t *testing.T) {
	a, _, _ := testApp(t)
	memFixture(t, a)
	keys := func(args ...string) []string {
		t.Helper()
		out, stderr, code := run(t, a, append([]string{"dlq", "ls", "--archive", "mem:fixture", "--json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var page lsJSON
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		ks := []string{}
		for _, e := range page.Entries {
			ks = append(ks, e.Key)
		}
		return ks
	}
	// fixedNow is 12:00 UTC; the fixture's dead letters are 3h, 2h, 90m
	// and 10m old.
	assert.Equal(t, []string{"order-1", "order-2", "order-3", "parcel-9"}, keys("--newer-than", "today"))
	assert.Empty(t, keys("--older-than", "today"))
	assert.Equal(t, []string{"order-1", "order-2", "order-3", "parcel-9"}, keys("--newer-than", "yesterday"))
	assert.Equal(t, []string{"parcel-9"}, keys("--newer-than", "2026-11-30T11:00"))
	assert.Equal(t, []string{"order-1", "order-2"}, keys("--older-than", "2026-11-30T10:01"))

	_, stderr, code := run(t, a, "dlq", "ls", "--archive", "mem:fixture", "--older-than", "someday")
	assert.Equal(t, exitUsage, code)
	assert.True(t, strings.Contains(stderr, `--older-than: "someday" is not a time: want an age back from now (30m, 1h, 2d, 1d12h), today, yesterday`), stderr)
}
