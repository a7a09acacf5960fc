package memarchive_test

import (
	"log/slog"
	"time"

	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/archivetest"
	"github.com/surely-dev/surely/dlq/memarchive"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	t.Parallel()
	archivetest.Run(t, func(t *testing.T) archive.Archive {
		a, err := memarchive.New()
		require.NoError(t, err)
		return a
	})
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]dlq.Option{
		"nil clock": dlq.WithClock(nil),
		// No retention: an in-memory archive lives no longer than its process.
		"retention": dlq.WithRetention(time.Hour),
		"logger":    dlq.WithLogger(slog.Default()),
		// An option of another constructor of the family is refused.
		"publisher option": dlq.WithConsumerGroup("g"),
	} {
		_, err := memarchive.New(opt)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
}

func BenchmarkArchive(b *testing.B) {
	archivetest.Bench(b, 10000, func(b *testing.B) archive.Archive {
		a, err := memarchive.New()
		require.NoError(b, err)
		return a
	})
}
