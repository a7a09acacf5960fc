package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
)

// commandLog records the commands a client sends, with their arguments.
type commandLog struct {
	mu   sync.Mutex
	cmds [][]any
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.cmds = append(l.cmds, cmd.Args())
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		for _, c := range cmds {
			l.cmds = append(l.cmds, c.Args())
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

// A listing walks the keyspace with SCAN and a bounded COUNT, never KEYS,
// and changes nothing: it sends no command that writes.
func TestListScansWithBoundedCount(t *testing.T) {
	t.Parallel()
	shared, prefix := setup(t)
	s := newStore(t, shared, redisstore.WithPrefix(prefix))
	for i := range 30 {
		acquire(t, s, claimReq(fmt.Sprintf("k%d", i)))
	}
	client := redis.NewClient(shared.Options())
	t.Cleanup(func() { _ = client.Close() })
	log := &commandLog{}
	client.AddHook(log)
	ls := newStore(t, client, redisstore.WithPrefix(prefix))
	log.mu.Lock()
	log.cmds = nil // what New sent
	log.mu.Unlock()

	for _, f := range []idempotency.ListFilter{{}, {Namespace: "ns"}, {Key: "k7"}, {Limit: 1}} {
		page, err := ls.List(t.Context(), f)
		require.NoError(t, err)
		require.NotEmpty(t, page.Records, "%+v", f)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	scans := 0
	for _, args := range log.cmds {
		name := strings.ToLower(fmt.Sprint(args[0]))
		switch name {
		case "scan":
			scans++
			require.GreaterOrEqual(t, len(args), 6, "%v", args)
			assert.Equal(t, "count", strings.ToLower(fmt.Sprint(args[4])), "%v", args)
			count, err := strconv.Atoi(fmt.Sprint(args[5]))
			require.NoError(t, err, "%v", args)
			assert.LessOrEqual(t, count, 200, "%v", args)
		case "time", "evalsha":
		default:
			t.Errorf("a listing sent %v", args)
		}
	}
	assert.Positive(t, scans)
}

// A listing after the server's script cache was emptied reads every record
// still: the keys whose pipelined script call got NOSCRIPT are read again
// through Get, which reloads the scripts.
func TestListAfterScriptFlush(t *testing.T) {
	t.Parallel()
	_, client := privateRedis(t)
	s := newStore(t, client)
	for i := range 3 {
		acquire(t, s, claimReq(fmt.Sprintf("k%d", i)))
	}
	require.NoError(t, client.ScriptFlush(t.Context()).Err())
	page, err := s.List(t.Context(), idempotency.ListFilter{})
	require.NoError(t, err)
	assert.Len(t, page.Records, 3)
	assert.Empty(t, page.Next)
}
