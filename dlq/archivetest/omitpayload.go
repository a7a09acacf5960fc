package archivetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// testListOmitsPayload: a listing with Page.OmitPayload has every entry
// the full listing has, field for field and metadata included, except the
// payload, which is nil; filters and pages work the same.
func testListOmitsPayload(t *testing.T, e *env) {
	for i := range 5 {
		l := letter{
			source: fmt.Sprintf("src-omit-%d", i), reason: dlq.ReasonExhausted, topic: "orders", handler: "h",
			key: fmt.Sprintf("k-%d", i%2), err: "boom", attempts: 3, at: base,
			payload: bytes.Repeat([]byte{byte('a' + i)}, 4096), md: map[string]string{"tenant": "acme", "n": fmt.Sprint(i)},
		}
		e.publish(envelope(l))
	}
	first := e.listAll(archive.Filter{}, 0)[0]
	e.markReplayed(first.ID, "run-omit")
	_, err := e.a.Mark(e.ctx, archive.Mark{To: archive.StateDiscarded, Note: "test"}, e.listAll(archive.Filter{}, 0)[1].ID)
	require.NoError(t, err)

	for _, f := range []archive.Filter{{}, {Key: "k-1"}} {
		full := e.listAll(f, 2)
		require.NotEmpty(t, full)
		var bare []archive.Entry
		var after int64
		for range 100 {
			page, err := e.a.List(e.ctx, f, archive.Page{After: after, Limit: 2, OmitPayload: true})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			require.LessOrEqual(t, len(page), 2)
			bare = append(bare, page...)
			after = page[len(page)-1].Seq
		}
		require.Len(t, bare, len(full), "filter %+v", f)
		for i := range full {
			w, g := full[i], bare[i]
			require.NotEmpty(t, w.Message.Payload)
			require.NotNil(t, g.Message, "entry without message")
			require.True(t, g.Message.Payload == nil, "payload of %s: %d bytes", g.ID, len(g.Message.Payload))
			require.Equal(t, w.Message.UUID, g.Message.UUID)
			require.Equal(t, w.Message.Metadata, g.Message.Metadata, "metadata of %s", g.ID)
			wm, gm := w.Message, g.Message
			w.Message, g.Message = nil, nil
			require.Equal(t, w, g, "entry %s", g.ID)
			w.Message, g.Message = wm, gm
		}
	}
}
