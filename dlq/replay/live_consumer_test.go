package replay_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // driver "sqlite", pure Go

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// A replay of more than one archive page of operations that keep failing,
// with a live consumer (handler.New on a Watermill router, GoChannel,
// memstore) dead-lettering each replayed message again into the archive
// while the run pages through it: the run publishes each entry once, and
// every operation ends with exactly one open entry (its re-failure), none
// of them a copy of itself. Run on memarchive and on sqlarchive (SQLite),
// which page differently.
func TestReplayWithLiveConsumerThatKeepsFailing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) archive.Archive
	}{
		{"memarchive", func(t *testing.T) archive.Archive {
			a, err := memarchive.New()
			require.NoError(t, err)
			return a
		}},
		{"sqlarchive-sqlite", func(t *testing.T) archive.Archive {
			dsn := "file:" + filepath.Join(t.TempDir(), "dlq.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
			db, err := sql.Open("sqlite", dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			a, err := sqlarchive.New(db, sqlstore.SQLite)
			require.NoError(t, err)
			require.NoError(t, a.Migrate(t.Context()))
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testLiveConsumerKeepsFailing(t, tc.open(t), 160)
		})
	}
}

func testLiveConsumerKeepsFailing(t *testing.T, a archive.Archive, n int) {
	ctx := t.Context()
	store, err := memstore.New()
	require.NoError(t, err)
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { require.NoError(t, pubSub.Close()) }()

	var deadLettered atomic.Int64
	h, err := handler.New(func(*message.Message) ([]*message.Message, error) {
		return nil, errors.New("warehouse down")
	},
		handler.WithStore(store, "reserve"),
		handler.WithDeadLetter(a, "dead-letters"),
		handler.WithMaxAttempts(1),
		handler.WithInProcessAttempts(1),
		handler.WithBackoff(time.Millisecond, time.Millisecond),
		handler.WithBreaker(nil), // every message fails: no outage to pause for
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			if p.Outcome == handler.OutcomeDeadLettered {
				deadLettered.Add(1)
			}
			return handler.OutcomeResult{}
		}),
	)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("reserve", "orders", pubSub, handler.NoPublish(h))
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- router.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-runDone)
	}()
	<-router.Running()

	for i := range n {
		require.NoError(t, pubSub.Publish("orders", source(i)))
	}
	require.Eventually(t, func() bool { return deadLettered.Load() == int64(n) }, 30*time.Second, 5*time.Millisecond,
		"the first failures dead-lettered")

	res, err := replay.Run(ctx, a, pubSub, archive.Filter{}, replay.WithID("live"), replay.WithStore(store), replay.WithAbortAfter(-1))
	require.NoError(t, err)
	// Every replayed message is dead-lettered again before the checks.
	require.Eventually(t, func() bool { return deadLettered.Load() == int64(n+res.Replayed) }, 30*time.Second, 5*time.Millisecond,
		"the replayed messages dead-lettered again: %d of %d", deadLettered.Load()-int64(n), res.Replayed)
	require.Equal(t, n, res.Replayed, "each entry once")
	require.Zero(t, res.Resolved)
	requireOneOpenPerOperation(t, a, n)

	got, err := replay.Reconcile(ctx, a, store, "live")
	require.NoError(t, err)
	require.Equal(t, n, got.Refailed, "every replayed entry failed again")
	require.Zero(t, got.Resolved)
	require.Zero(t, got.Pending)
}
