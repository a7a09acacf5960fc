package idempotency_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
)

// What a store checks before it claims: ClaimRequest.Validate and
// ValidateNamespace at their boundaries, and Truncate, which bounds the
// error and stack text a store keeps.

func validRequest() idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Namespace: "billing", Key: "order-1", Lease: time.Second, MaxAttempts: 1}
}

func TestClaimRequestValidateBoundaries(t *testing.T) {
	t.Parallel()
	require.NoError(t, validRequest().Validate(), "one attempt and any positive lease")

	tiny := validRequest()
	tiny.Lease = time.Nanosecond
	require.NoError(t, tiny.Validate())

	reopen := validRequest()
	reopen.Reopen = "replay-1"
	require.NoError(t, reopen.Validate())

	cases := map[string]func(*idempotency.ClaimRequest){
		"empty namespace":     func(r *idempotency.ClaimRequest) { r.Namespace = "" },
		"empty key":           func(r *idempotency.ClaimRequest) { r.Key = "" },
		"control in key":      func(r *idempotency.ClaimRequest) { r.Key = "a\nb" },
		"zero lease":          func(r *idempotency.ClaimRequest) { r.Lease = 0 },
		"negative lease":      func(r *idempotency.ClaimRequest) { r.Lease = -time.Second },
		"zero attempts":       func(r *idempotency.ClaimRequest) { r.MaxAttempts = 0 },
		"negative attempts":   func(r *idempotency.ClaimRequest) { r.MaxAttempts = -1 },
		"control in reopen":   func(r *idempotency.ClaimRequest) { r.Reopen = "a\x00b" },
		"oversized reopen ID": func(r *idempotency.ClaimRequest) { r.Reopen = strings.Repeat("r", defaults.MaxKeyLen+1) },
	}
	for name, change := range cases {
		r := validRequest()
		change(&r)
		assert.ErrorIs(t, r.Validate(), idempotency.ErrInvalidRequest, name)
	}
}

func TestValidateNamespaceCharacters(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{
		"a", "z", "A", "Z", "0", "9", ".", "_", "-",
		"Billing.v2_eu-west", strings.Repeat("n", 128),
	} {
		assert.NoError(t, idem.ValidateNamespace(ns), "%q", ns)
	}
	// The neighbours of every allowed range in ASCII, and lengths 0 and 129.
	for _, ns := range []string{
		"", strings.Repeat("n", 129),
		"`", "{", "@", "[", "/", ":", " ", ",", "+", "é", "a/b", "ab:",
	} {
		assert.ErrorIs(t, idem.ValidateNamespace(ns), idempotency.ErrInvalidRequest, "%q", ns)
	}
}

func TestTruncateKeepsWholeRunes(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "abc", idem.Truncate("abc", 3), "fits exactly")
	assert.Equal(t, "abc", idem.Truncate("abc", 10))
	assert.Equal(t, "ab", idem.Truncate("abc", 2))
	assert.Empty(t, idem.Truncate("abc", 0))
	// "é" is two bytes: cutting inside it drops the whole rune.
	assert.Equal(t, "h", idem.Truncate("héllo", 2))
	assert.Equal(t, "hé", idem.Truncate("héllo", 3))
	// Nothing before the cut starts a rune: the result is empty, not a
	// slice before the string's start.
	assert.Empty(t, idem.Truncate("\x80\x80abc", 1))
}
