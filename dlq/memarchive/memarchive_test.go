package memarchive_test

import (
	"log/slog"
	"time"

	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archivetest"
	"github.com/surely-dev/surely/dlq/memarchive"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	t.Parallel()
	archivetest.Run(t, func(t *testing.T) dlq.Archive {
		a, err := memarchive.New()
		require.NoError(t, err)
		return a
	})
}

func TestPrune(t *testing.T) {
	t.Parallel()
	archivetest.RunPrune(t, func(t *testing.T, retention time.Duration, log *slog.Logger) archivetest.PruneArchive {
		opts := []memarchive.Option{memarchive.WithLogger(log)}
		if retention > 0 {
			opts = append(opts, memarchive.WithRetention(retention))
		}
		a, err := memarchive.New(opts...)
		require.NoError(t, err)
		return a
	})
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]memarchive.Option{
		"zero retention": memarchive.WithRetention(0),
		"nil clock":      memarchive.WithClock(nil),
		"nil logger":     memarchive.WithLogger(nil),
	} {
		_, err := memarchive.New(opt)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
}

func BenchmarkArchive(b *testing.B) {
	archivetest.Bench(b, 10000, func(b *testing.B) dlq.Archive {
		a, err := memarchive.New()
		require.NoError(b, err)
		return a
	})
}
