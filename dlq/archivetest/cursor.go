package archivetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// testCursorUnderConcurrentPublish: a reader that pages with a cursor
// (List After the last Seq it saw) while several writers publish sees
// every entry, each once, in increasing Seq: Seq order must be the order
// in which entries become visible, or a cursor skips an entry for good.
// (A deterministic interleaving needs the backend's own hooks; see
// sqlarchive's TestCursorSeesLateCommit. This is the bounded stress form
// every archive runs.)
func testCursorUnderConcurrentPublish(t *testing.T, e *env) {
	const writers, each = 4, 30
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				select {
				case <-stop:
					return
				default:
				}
				m := envelope(letter{source: fmt.Sprintf("cursor-%d-%d", w, i), reason: dlq.ReasonExhausted, topic: "orders", at: base})
				if err := e.a.Publish("dead", m); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	written := make(chan struct{})
	go func() { wg.Wait(); close(written) }()
	defer func() {
		close(stop)
		<-written
	}()

	seen := map[string]int64{}
	var cursor int64
	read := func() int {
		page, err := e.a.List(e.ctx, archive.Filter{}, archive.Page{After: cursor, Limit: 50})
		require.NoError(t, err)
		for _, en := range page {
			require.Greater(t, en.Seq, cursor, "List After %d returned Seq %d", cursor, en.Seq)
			_, dup := seen[en.ID]
			require.False(t, dup, "entry %s returned twice", en.ID)
			seen[en.ID] = en.Seq
			cursor = en.Seq
		}
		return len(page)
	}
	deadline := time.Now().Add(time.Minute)
	for done := false; !done; {
		select {
		case <-written:
			done = true
		default:
		}
		require.True(t, time.Now().Before(deadline), "writers did not finish in a minute")
		read()
	}
	for range 100 {
		if read() == 0 {
			break
		}
	}
	missed := 0
	for w := range writers {
		for i := range each {
			if _, ok := seen[envelope(letter{source: fmt.Sprintf("cursor-%d-%d", w, i)}).UUID]; !ok {
				missed++
			}
		}
	}
	require.Zero(t, missed, "the cursor skipped %d of %d entries", missed, writers*each)
}
