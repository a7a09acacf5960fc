package middleware_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
)

// The lease is at least 10ms: 10ms itself is accepted, anything shorter is
// an invalid option.
func TestWithLeaseAtLeastTenMilliseconds(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	_, err = middleware.Dedup(mem, "v", middleware.WithLease(10*time.Millisecond))
	require.NoError(t, err)
	for _, d := range []time.Duration{10*time.Millisecond - 1, time.Millisecond, 0} {
		_, err = middleware.Dedup(mem, "v", middleware.WithLease(d))
		require.ErrorIs(t, err, middleware.ErrInvalidOption, "lease %v", d)
	}
}

// Both the extension interval and the longest hold must be positive: a zero
// one is an invalid option, not a silent fallback to the defaults.
func TestWithExtensionRejectsZero(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	for _, c := range []struct{ every, maxHeld time.Duration }{
		{0, time.Minute}, {-time.Second, time.Minute}, {time.Second, 0}, {time.Second, -time.Minute},
	} {
		_, err = middleware.Dedup(mem, "v", middleware.WithExtension(c.every, c.maxHeld))
		require.ErrorIs(t, err, middleware.ErrInvalidOption, "WithExtension(%v, %v)", c.every, c.maxHeld)
	}
	_, err = middleware.Dedup(mem, "v", middleware.WithExtension(time.Nanosecond, time.Nanosecond))
	require.NoError(t, err)
}
