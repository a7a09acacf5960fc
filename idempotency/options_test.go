package idempotency_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// One option type configures the Extractor and every store: NewExtractor
// refuses the store options instead of ignoring them, and a nil option.
func TestNewExtractorRefusesOptionsItDoesNotTake(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]idempotency.Option{
		"WithRetention": idempotency.WithRetention(time.Hour),
		"WithLogger":    idempotency.WithLogger(slog.Default()),
		"WithClock":     idempotency.WithClock(time.Now),
	} {
		_, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromUUID()), opt)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
		require.ErrorContains(t, err, "idempotency.NewExtractor does not take option "+name)
	}
	_, err := idempotency.NewExtractor(nil)
	require.ErrorIs(t, err, idempotency.ErrInvalidOption, "nil option")

	ex, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromUUID()), idempotency.WithFingerprintMetadata("amount"))
	require.NoError(t, err)
	require.NotNil(t, ex)
}

// The common options validate their argument whatever takes them.
func TestCommonOptionsValidate(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]idempotency.Option{
		"zero retention":     idempotency.WithRetention(0),
		"negative retention": idempotency.WithRetention(-time.Second),
		"nil logger":         idempotency.WithLogger(nil),
		"nil clock":          idempotency.WithClock(nil),
	} {
		_, err := idempotency.NewExtractor(opt)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
		require.NotContains(t, err.Error(), "does not take", name)
	}
}
