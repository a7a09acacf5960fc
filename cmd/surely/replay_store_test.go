package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency/memstore"
)

// TestReplayStoreGuard: with --store the retention guard reads each
// operation's record; a store that no longer has them (expired) refuses
// every entry although the envelopes' retention (24h) has not run out.
func TestReplayStoreGuard(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	memFixture(t, a)
	st, err := memstore.New()
	require.NoError(t, err)
	a.memStores["empty"] = st
	out, stderr, code := run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--store", "mem:empty", "--dry-run")
	assert.Equal(t, exitRefused, code, "%s\n%s", out, stderr)
	assert.Contains(t, out+stderr, "gone from the store")
	out, stderr, code = run(t, a, "dlq", "replay", "--archive", "mem:fixture", "--dry-run")
	assert.Equal(t, exitOK, code, "without the store the envelope's retention decides: %s\n%s", out, stderr)
}
