package redisarchive_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/internal/testenv"
)

// A listing without payloads does not transfer them: measured in bytes
// sent by the server through a counting proxy.
func TestListOmitPayloadTransfersNoPayload(t *testing.T) {
	t.Parallel()
	rdb, prefix := setup(t)
	proxy := testenv.StartProxy(t, rdb.Options().Addr)
	opt := *rdb.Options()
	opt.Addr = proxy.Addr
	via := redis.NewClient(&opt)
	t.Cleanup(func() { _ = via.Close() })
	a, err := redisarchive.New(via, archive.WithPrefix(prefix))
	require.NoError(t, err)
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
