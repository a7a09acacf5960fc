package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/internal/archivekit"
)

// A run goes on past a full page of the archive: one entry more than a
// page (archivekit.DefaultPageSize) is replayed whole, the last entry on the
// second page.
func TestRunReplaysPastAFullPage(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	n := archivekit.DefaultPageSize + 1
	for i := range n {
		src := source(i)
		require.NoError(t, a.Publish("dead-letters", dlq.Wrap(src, dlq.Failure{
			Reason: dlq.ReasonPermanent, Err: assert.AnError, Attempts: 1,
			OperationKey: src.UUID, Topic: "orders", Handler: "reserve", Namespace: "reserve",
			Retention: 24 * time.Hour, At: t0,
		}, nil, "host-1", "group-1")))
	}
	rec := &recorder{clock: c}
	res, err := replay.Run(context.Background(), a, rec, archive.Filter{}, on(c)...)
	require.NoError(t, err)
	require.Equal(t, n, res.Replayed, "%+v", res)
}
