package middleware_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// A Complete that the store applied but whose reply was lost is retried;
// the retry is the same call, so the delivery is processed and its
// produced messages go out now, instead of a lost lease and a nack.
func TestDedupCompleteReplyLostIsProcessed(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	store := &faultStore{Store: mem}
	store.lostCompletes.Store(1)
	c := newLeaseChain(t, store, "reply-lost", produceOne)

	msgs, err := c.deliver("op-1")
	require.NoError(t, err)
	require.Equal(t, delivery.OutcomeProcessed, c.lastOutcome())
	require.Len(t, msgs, 1)
	require.Equal(t, "produced-1", msgs[0].UUID)
	require.Equal(t, int32(2), store.completes.Load(), "the lost reply was retried once")
	rec, err := mem.Get(t.Context(), "reply-lost", "op-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 1, rec.Attempts)
}

// dropCompleteReply is a go-redis hook that lets the first Complete script
// run on the server and then loses its reply, as when the call's deadline
// passes while the reply is on its way.
type dropCompleteReply struct{ dropped atomic.Int32 }

func (*dropCompleteReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*dropCompleteReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *dropCompleteReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		// Only the complete script takes one key and four arguments:
		// EVALSHA sha 1 key token request-id outcome retention.
		if err == nil && len(args) == 8 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && h.dropped.Add(1) == 1 {
			err = fmt.Errorf("complete's reply lost: %w", context.DeadlineExceeded)
			cmd.SetErr(err)
		}
		return err
	}
}

// The same on a real Redis: the Complete script ran, its reply was lost,
// the dedup step's retry is recognised as the call that was applied.
func TestDedupCompleteReplyLostRedis(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t)
	hook := &dropCompleteReply{}
	client.AddHook(hook)
	prefix := fmt.Sprintf("surely-test:lease-%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := client.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			_ = client.Del(ctx, keys...).Err()
		}
	})
	store, err := redisstore.New(t.Context(), client, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	c := newLeaseChain(t, store, "reply-lost", produceOne)

	msgs, err := c.deliver("op-1")
	require.NoError(t, err)
	require.Equal(t, delivery.OutcomeProcessed, c.lastOutcome())
	require.Len(t, msgs, 1)
	require.Equal(t, "produced-1", msgs[0].UUID)
	require.Equal(t, int32(2), hook.dropped.Load(), "one lost reply, one retry")

	rec, err := store.Get(t.Context(), "reply-lost", "op-1")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, "produced-1", rec.Outcome.Messages[0].UUID)

	// A redelivery is a duplicate with the same produced message.
	msgs, err = c.deliver("op-1")
	require.NoError(t, err)
	require.Equal(t, delivery.OutcomeDuplicate, c.lastOutcome())
	require.Equal(t, "produced-1", msgs[0].UUID)
}
