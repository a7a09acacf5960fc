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

func TestPrune(t *testing.T) {
	t.Parallel()
	archivetest.RunPrune(t, func(t *testing.T, retention time.Duration, log *slog.Logger) archivetest.PruneArchive {
		opts := []dlq.Option{dlq.WithLogger(log)}
		if retention > 0 {
			opts = append(opts, dlq.WithRetention(retention))
		}
		a, err := memarchive.New(opts...)
		require.NoError(t, err)
		return a
	})
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]dlq.Option{
		"zero retention": dlq.WithRetention(0),
		"nil clock":      dlq.WithClock(nil),
		"nil logger":     dlq.WithLogger(nil),
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
