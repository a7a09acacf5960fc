package sqlarchive_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"net/url"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// A listing without payloads does not transfer them: measured in bytes
// sent by PostgreSQL through a counting proxy.
func TestListOmitPayloadTransfersNoPayload(t *testing.T) {
	t.Parallel()
	testsql.Postgres(t) // skips (or fails under SURELY_REQUIRE_SERVICES=1) without the server
	u, err := url.Parse(testenv.URL(t, "SURELY_POSTGRES_URL"))
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	u.Host = proxy.Addr
	a := setup(t, backend{"postgres", sqlstore.Postgres, func(t testing.TB) *sql.DB {
		db, err := testsql.OpenPostgres(u.String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}})
	ctx := t.Context()

	const n, size = 8, 256 << 10 // 2 MiB of payloads
	for i := range n {
		m := message.NewMessage(fmt.Sprintf("big-%d", i), bytes.Repeat([]byte{'x'}, size))
		m.Metadata.Set("n", fmt.Sprint(i))
		require.NoError(t, a.Publish("dead", m))
	}

	before := proxy.Sent()
	bare, err := a.List(ctx, archive.Filter{}, archive.Page{Limit: n, OmitPayload: true})
	require.NoError(t, err)
	bareBytes := proxy.Sent() - before
	require.Len(t, bare, n)
	for _, e := range bare {
		require.True(t, e.Message.Payload == nil, "payload of %s: %d bytes", e.ID, len(e.Message.Payload))
		require.NotEmpty(t, e.Message.Metadata.Get("n"))
	}
	require.Less(t, bareBytes, int64(size), "a listing without payloads transferred %d bytes", bareBytes)

	before = proxy.Sent()
	full, err := a.List(ctx, archive.Filter{}, archive.Page{Limit: n})
	require.NoError(t, err)
	require.Len(t, full, n)
	require.GreaterOrEqual(t, proxy.Sent()-before, int64(n*size), "the proxy counts what a full listing transfers")
	t.Logf("%d entries of %d bytes: listed without payloads %d bytes, with payloads %d bytes",
		n, size, bareBytes, proxy.Sent()-before)
}
