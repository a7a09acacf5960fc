package redisstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// hookSetup returns an entryHook, the channel that closes it, and a next
// hook that counts its calls and answers with answer.
func hookSetup(t *testing.T, answer func(redis.Cmder) error) (entryHook, chan struct{}, redis.ProcessHook, *atomic.Int64) {
	t.Helper()
	closing := make(chan struct{})
	h := entryHook{closing: closing, reading: new(atomic.Int64), postponed: new(sync.Map)}
	calls := new(atomic.Int64)
	next := func(_ context.Context, cmd redis.Cmder) error {
		calls.Add(1)
		return answer(cmd)
	}
	return h, closing, h.ProcessHook(next), calls
}

func TestEntryHookTagsReadAndClaimedEntries(t *testing.T) {
	t.Parallel()
	_, _, process, calls := hookSetup(t, func(cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.XStreamSliceCmd:
			c.SetVal([]redis.XStream{{Stream: "s", Messages: []redis.XMessage{{ID: "1-0"}}}})
		case *redis.XMessageSliceCmd:
			c.SetVal([]redis.XMessage{{ID: "2-0", Values: map[string]any{"k": "v"}}})
		}
		return nil
	})
	read := redis.NewXStreamSliceCmd(t.Context(), "xreadgroup")
	require.NoError(t, process(t.Context(), read))
	require.Equal(t, map[string]any{fieldID: "1-0"}, read.Val()[0].Messages[0].Values, "a deleted entry gets a map too")

	claim := redis.NewXMessageSliceCmd(t.Context(), "xclaim")
	require.NoError(t, process(t.Context(), claim))
	require.Equal(t, map[string]any{"k": "v", fieldID: "2-0", fieldClaimed: "1"}, claim.Val()[0].Values)

	other := redis.NewXMessageSliceCmd(t.Context(), "xrange")
	require.NoError(t, process(t.Context(), other))
	require.Equal(t, map[string]any{"k": "v"}, other.Val()[0].Values, "other commands pass untouched")
	require.Equal(t, int64(3), calls.Load())
}

func TestEntryHookFailedCommandIsReturned(t *testing.T) {
	t.Parallel()
	failed := errors.New("claim failed")
	_, _, process, _ := hookSetup(t, func(redis.Cmder) error { return failed })
	require.ErrorIs(t, process(t.Context(), redis.NewXMessageSliceCmd(t.Context(), "xclaim")), failed)
	require.ErrorIs(t, process(t.Context(), redis.NewXStreamSliceCmd(t.Context(), "xreadgroup")), failed)
}

func TestEntryHookClosingTakesNoEntry(t *testing.T) {
	t.Parallel()
	h, closing, process, calls := hookSetup(t, func(redis.Cmder) error { return nil })
	close(closing)

	read := redis.NewXStreamSliceCmd(t.Context(), "xreadgroup")
	require.ErrorIs(t, process(t.Context(), read), redis.Nil)
	require.ErrorIs(t, read.Err(), redis.Nil, "watermill-redisstream sees an empty read")
	require.Zero(t, h.reading.Load(), "the read is no longer in flight")

	claim := redis.NewXMessageSliceCmd(t.Context(), "xclaim")
	require.ErrorIs(t, process(t.Context(), claim), errClosing)
	require.ErrorIs(t, claim.Err(), errClosing, "not redis.Nil: watermill-redisstream would ack")
	require.Zero(t, calls.Load(), "nothing reaches the server")
}

func TestEntryHookDropsOnePostponedAck(t *testing.T) {
	t.Parallel()
	h, _, process, calls := hookSetup(t, func(cmd redis.Cmder) error {
		cmd.(*redis.IntCmd).SetVal(1)
		return nil
	})
	xack := func(ctx context.Context) *redis.IntCmd {
		c := redis.NewIntCmd(ctx, "xack", "s", "g", "1-0")
		require.NoError(t, process(ctx, c))
		return c
	}
	h.postponed.Store(postponedKey("s", "1-0"), struct{}{})
	require.Equal(t, int64(1), xack(context.WithValue(t.Context(), ownAck{}, true)).Val(), "the subscriber's own XACK is never dropped")
	require.Equal(t, int64(0), xack(t.Context()).Val(), "watermill-redisstream's XACK of a postponed entry is dropped")
	require.Equal(t, int64(1), calls.Load())
	require.Equal(t, int64(1), xack(t.Context()).Val(), "only once")
	require.Equal(t, int64(2), calls.Load())
}
