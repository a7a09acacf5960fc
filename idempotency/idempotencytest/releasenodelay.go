package idempotencytest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A release without a positive RetryAfter keeps no NotBefore (zero if none,
// not the release's own time), and the key is claimable at once.
func testReleaseWithoutDelayKeepsNoNotBefore(t *testing.T, e *env) {
	for key, retryAfter := range map[string]time.Duration{"zero": 0, "negative": -time.Second} {
		l := e.acquire(e.req(key), 1).Lease
		f := testFailure
		f.RetryAfter = retryAfter
		e.release(l, f)
		rec := e.get(key)
		require.True(t, rec.NotBefore.IsZero(), "Release(RetryAfter %v) keeps NotBefore %v, want zero", retryAfter, rec.NotBefore)
		e.acquire(e.req(key), 2)
	}
}
