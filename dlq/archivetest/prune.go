package archivetest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// PruneArchive is an archive under a retention policy, for RunPrune:
// Prune deletes the entries dead-lettered longer ago than the retention,
// logs how many, and returns the count; without a configured retention it
// deletes nothing.
type PruneArchive interface {
	archive.Archive
	Prune(ctx context.Context) (int, error)
}

// RunPrune checks an archive's retention: newArchive returns an empty
// archive that logs to log and keeps entries for retention (0: no
// retention option at all, keep everything).
func RunPrune(t *testing.T, newArchive func(t *testing.T, retention time.Duration, log *slog.Logger) PruneArchive) {
	t.Helper()
	t.Run("PruneDeletesOnlyOldEntriesAndLogs", func(t *testing.T) {
		t.Parallel()
		var buf syncBuffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		a := newArchive(t, time.Hour, log)
		now := time.Now()
		old := envelope(letter{source: "old", reason: dlq.ReasonExhausted, at: now.Add(-2 * time.Hour)})
		older := envelope(letter{source: "older", reason: dlq.ReasonExhausted, at: now.Add(-30 * 24 * time.Hour)})
		fresh := envelope(letter{source: "fresh", reason: dlq.ReasonExhausted, at: now.Add(-10 * time.Minute)})
		require.NoError(t, a.Publish("dead", old, fresh, older))
		n, err := a.Prune(t.Context())
		require.NoError(t, err)
		require.Equal(t, 2, n)
		_, err = a.Get(t.Context(), old.UUID)
		require.ErrorIs(t, err, archive.ErrNotFound)
		_, err = a.Get(t.Context(), fresh.UUID)
		require.NoError(t, err, "a fresh entry is kept")
		require.Contains(t, buf.String(), "deleted=2", "pruning is logged with its count")

		n, err = a.Prune(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
	})
	t.Run("NoRetentionKeepsEverything", func(t *testing.T) {
		t.Parallel()
		a := newArchive(t, 0, slog.New(slog.DiscardHandler))
		ancient := envelope(letter{source: "ancient", reason: dlq.ReasonExhausted, at: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)})
		require.NoError(t, a.Publish("dead", ancient))
		n, err := a.Prune(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
		_, err = a.Get(t.Context(), ancient.UUID)
		require.NoError(t, err)
	})
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
