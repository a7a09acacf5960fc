package redisarchive_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/archivetest"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns a client on the shared server and a fresh prefix whose
// keys are deleted when the test ends.
func setup(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := testenv.Redis(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "surely-test:dlq:" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, "{"+prefix+"}:*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = rdb.Del(ctx, iter.Val()).Err()
		}
	})
	return rdb, prefix
}

func TestConformance(t *testing.T) {
	t.Parallel()
	archivetest.Run(t, func(t *testing.T) archive.Archive {
		rdb, prefix := setup(t)
		a, err := redisarchive.New(rdb, archive.WithPrefix(prefix))
		require.NoError(t, err)
		return a
	})
}

func TestKeysShareOneHashTagAndHaveNoTTL(t *testing.T) {
	t.Parallel()
	rdb, prefix := setup(t)
	a, err := redisarchive.New(rdb, archive.WithPrefix(prefix))
	require.NoError(t, err)
	m := message.NewMessage("id-1", []byte("p"))
	require.NoError(t, a.Publish("dead", m))
	n, err := a.Mark(t.Context(), archive.Mark{To: archive.StateReplayed, Run: "run-1"}, "id-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, a.SaveReplay(t.Context(), archive.ReplayRun{ID: "run-1"}))

	keys, err := rdb.Keys(t.Context(), "{"+prefix+"}:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 5, "seq, idx, entry, run, runs: %v", keys)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "{"+prefix+"}:"), "%s has the archive's hash tag", k)
		ttl, err := rdb.PTTL(t.Context(), k).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "%s must not expire", k)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = rdb.Close() }()
	for name, opt := range map[string]dlq.Option{
		"empty prefix":   archive.WithPrefix(""),
		"brace prefix":   archive.WithPrefix("a{b}"),
		"zero retention": dlq.WithRetention(0),
		"nil clock":      dlq.WithClock(nil),
		"nil logger":     dlq.WithLogger(nil),
		// An option of another constructor of the family is refused.
		"publisher option": dlq.WithConsumerGroup("g"),
	} {
		_, err := redisarchive.New(rdb, opt)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
	_, err := redisarchive.New(nil)
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
}

func TestMarkReplayedRefusesNUL(t *testing.T) {
	// The run IDs of an entry are NUL-separated in its hash.
	t.Parallel()
	rdb, prefix := setup(t)
	a, err := redisarchive.New(rdb, archive.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, a.Publish("dead", message.NewMessage("id-1", nil)))
	for _, run := range []string{"a\x00b", ""} {
		_, err := a.Mark(t.Context(), archive.Mark{To: archive.StateReplayed, Run: run}, "id-1")
		require.ErrorIs(t, err, dlq.ErrInvalidOption, "run %q", run)
	}
}

func TestServerDownIsAnError(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	a, err := redisarchive.New(rdb)
	require.NoError(t, err)
	require.Error(t, a.Publish("dead", message.NewMessage("id-1", nil)), "an unreachable archive fails the publish: the source is nacked")
}

func TestPrune(t *testing.T) {
	t.Parallel()
	archivetest.RunPrune(t, func(t *testing.T, retention time.Duration, log *slog.Logger) archivetest.PruneArchive {
		rdb, prefix := setup(t)
		opts := []dlq.Option{archive.WithPrefix(prefix), dlq.WithLogger(log)}
		if retention > 0 {
			opts = append(opts, dlq.WithRetention(retention))
		}
		a, err := redisarchive.New(rdb, opts...)
		require.NoError(t, err)
		return a
	})
}

func BenchmarkArchive(b *testing.B) {
	archivetest.Bench(b, 10000, func(b *testing.B) archive.Archive {
		rdb, prefix := setup(b)
		a, err := redisarchive.New(rdb, archive.WithPrefix(prefix))
		require.NoError(b, err)
		return a
	})
}

func TestCorruptEntryIsAClearError(t *testing.T) {
	t.Parallel()
	rdb, prefix := setup(t)
	a, err := redisarchive.New(rdb, archive.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, a.Publish("dead", message.NewMessage("id-1", []byte("p"))))
	require.NoError(t, rdb.HSet(t.Context(), "{"+prefix+"}:e:id-1", "seq", "not a number").Err())
	_, err = a.Get(t.Context(), "id-1")
	require.ErrorContains(t, err, `entry "id-1" is corrupt`)
	_, err = a.Stats(t.Context(), archive.Filter{})
	require.ErrorContains(t, err, "corrupt")
}

func TestListByIDsPagesInSeqOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := setup(t)
	a, err := redisarchive.New(rdb, archive.WithPrefix(prefix))
	require.NoError(t, err)
	for _, id := range []string{"c", "a", "d", "b"} {
		require.NoError(t, a.Publish("dead", message.NewMessage(id, nil)))
	}
	ids := func(es []archive.Entry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.ID
		}
		return out
	}
	f := archive.Filter{IDs: []string{"b", "a", "d", "a", "c"}}
	first, err := a.List(t.Context(), f, archive.Page{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a"}, ids(first), "publish order, duplicates once, stops at the limit")
	rest, err := a.List(t.Context(), f, archive.Page{After: first[1].Seq, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"d", "b"}, ids(rest))
}

func TestListAndStatsOnServerDownAreErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	a, err := redisarchive.New(rdb)
	require.NoError(t, err)
	_, err = a.List(t.Context(), archive.Filter{}, archive.Page{})
	require.ErrorContains(t, err, "read index")
	_, err = a.Stats(t.Context(), archive.Filter{IDs: []string{"id-1"}})
	require.Error(t, err)
}
