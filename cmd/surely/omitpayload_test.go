package main

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
)

// pageRecorder is an archive that records the pages it is asked to list.
type pageRecorder struct {
	archive.Archive
	mu    sync.Mutex
	pages []archive.Page
}

func (r *pageRecorder) List(ctx context.Context, f archive.Filter, p archive.Page) ([]archive.Entry, error) {
	r.mu.Lock()
	r.pages = append(r.pages, p)
	r.mu.Unlock()
	return r.Archive.List(ctx, f, p)
}

// ls and purge show and delete by ID and metadata only: they list without
// payloads, so a page of large dead letters never holds them all in memory.
func TestLsAndPurgeListWithoutPayloads(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	rec := &pageRecorder{Archive: memFixture(t, a)}
	a.memArchives["fixture"] = rec
	for _, args := range [][]string{
		{"dlq", "ls", "--archive", "mem:fixture"},
		{"dlq", "ls", "--archive", "mem:fixture", "--json"},
		{"dlq", "purge", "--archive", "mem:fixture", "--all", "--yes", "--why", "test", "--json"},
	} {
		_, stderr, code := run(t, a, args...)
		require.Zero(t, code, "%v: %s", args, stderr)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.pages)
	for _, p := range rec.pages {
		require.True(t, p.OmitPayload, "a listing read payloads: %+v", p)
	}
}
