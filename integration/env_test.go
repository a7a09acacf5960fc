package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/childproc"
	"github.com/surely-dev/surely/internal/testenv"
)

// namespace is the handler namespace of every test's dedup records.
const namespace = "orders"

// names derives every Redis key and stream a test uses from its prefix, so
// that the parent and its child processes agree on them.
type names struct{ Prefix string }

func (n names) Stream() string      { return n.Prefix + "orders" }
func (n names) Dead() string        { return n.Prefix + "dead" }
func (n names) Group() string       { return n.Prefix + "group" }
func (n names) Effects() string     { return n.Prefix + "effects" }    // hash: operation key → effects
func (n names) Previous() string    { return n.Prefix + "previous" }   // hash: "key:attempt" → Previous.Result
func (n names) Runs() string        { return n.Prefix + "runs" }       // list: handler start/end, in server order
func (n names) Outcomes() string    { return n.Prefix + "outcomes" }   // hash: "consumer|outcome" → deliveries
func (n names) InProgress() string  { return n.Prefix + "inprogress" } // list: unix ms of in_progress refusals
func (n names) StorePrefix() string { return n.Prefix + "store:" }

// suite is one test's view of the shared Redis.
type suite struct {
	t     *testing.T
	url   string
	rdb   *redis.Client
	n     names
	store *redisstore.Store // the parent's view of the dedup records
	seq   atomic.Int32
}

// setup connects to the shared Redis (skipping without it), gives the test a
// unique prefix and deletes every key under it when the test ends. tag must
// be a plain [a-z0-9-] word: the prefix is also a SCAN pattern.
func setup(t *testing.T, tag string) *suite {
	t.Helper()
	rdb := testenv.Redis(t)
	s := &suite{t: t, url: testenv.URL(t, "SURELY_REDIS_URL"), rdb: rdb,
		n: names{Prefix: "surely-it:" + tag + ":" + randomHex(6) + ":"}}
	// Registered after testenv.Redis's own cleanup, so it runs before the
	// client is closed; child processes register their kill later still, so
	// they are dead before their streams and groups are deleted (a live
	// consumer would recreate them).
	t.Cleanup(func() { deleteKeys(t, rdb, s.n.Prefix) })
	store, err := redisstore.New(context.Background(), rdb, redisstore.WithPrefix(s.n.StorePrefix()))
	require.NoError(t, err)
	s.store = store
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// deleteKeys deletes every key under prefix (SCAN + DEL, never FLUSH).
func deleteKeys(t *testing.T, rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for range 10_000 { // bounded: SCAN ends long before on a test server
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			t.Errorf("cleanup: SCAN %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup: DEL: %v", err)
				return
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
	t.Errorf("cleanup: SCAN %s* did not finish", prefix)
}

// order builds the message of one operation: key in metadata, a fresh UUID.
func order(key string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte("pay 10 for "+key))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	msg.Metadata.Set("tenant", "acme")
	return msg
}

// publish XADDs msgs to the test's stream in watermill-redisstream's format
// and returns the stream ID of the last one.
func (s *suite) publish(t *testing.T, msgs ...*message.Message) string {
	t.Helper()
	var id string
	for _, msg := range msgs {
		values, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal(s.n.Stream(), msg)
		require.NoError(t, err)
		id, err = s.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: s.n.Stream(), Values: values}).Result()
		require.NoError(t, err)
	}
	return id
}

// eventually polls cond every 50ms until it holds, and fails the test with
// what and cond's last detail when timeout passes first.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v (%s)", what, timeout, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAcked waits until the consumer group has read the stream up to lastID
// and has no pending (unacked) entry left.
func (s *suite) waitAcked(t *testing.T, lastID string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "every message acked", func() (bool, string) {
		groups, err := s.rdb.XInfoGroups(context.Background(), s.n.Stream()).Result()
		if err != nil {
			return false, err.Error()
		}
		for _, g := range groups {
			if g.Name == s.n.Group() {
				return g.Pending == 0 && g.LastDeliveredID == lastID,
					fmt.Sprintf("pending=%d last_delivered=%s want %s", g.Pending, g.LastDeliveredID, lastID)
			}
		}
		return false, "no consumer group yet"
	})
}

// effects is how many times the business effect ran for key.
func (s *suite) effects(t *testing.T, key string) int64 {
	t.Helper()
	n, err := s.rdb.HGet(context.Background(), s.n.Effects(), key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// previous is the Previous.Result the handler saw on attempt of key
// ("none" for a first attempt, "" if that attempt never ran).
func (s *suite) previous(t *testing.T, key string, attempt int) string {
	t.Helper()
	v, err := s.rdb.HGet(context.Background(), s.n.Previous(), key+":"+strconv.Itoa(attempt)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// deadLetters reads the dead-letter stream.
func (s *suite) deadLetters(t *testing.T) []*message.Message {
	t.Helper()
	xs, err := s.rdb.XRange(context.Background(), s.n.Dead(), "-", "+").Result()
	require.NoError(t, err)
	out := make([]*message.Message, 0, len(xs))
	for _, x := range xs {
		msg, err := redisstream.DefaultMarshallerUnmarshaller{}.Unmarshal(x.Values)
		require.NoError(t, err)
		out = append(out, msg)
	}
	return out
}

func (s *suite) record(t *testing.T, key string) idempotency.Record {
	t.Helper()
	rec, err := s.store.Get(context.Background(), namespace, key)
	require.NoError(t, err)
	return rec
}

// ---- child consumer processes ----

// child is a consumer process: the test binary re-executed with
// SURELY_INTEGRATION_CHILD=1 (see childMain).
type child = childproc.Proc

// baseConfig is the child configuration of most tests: a 1s lease (so a dead
// owner's lease expires in test time) and a redisstream consumer that claims
// the pending entries of a dead consumer after 500ms idle.
func baseConfig() childConfig {
	return childConfig{
		Crash:         noCrash,
		Lease:         time.Second,
		MaxAttempts:   5,
		ClaimInterval: 200 * time.Millisecond,
		MaxIdle:       500 * time.Millisecond,
	}
}

// startChild starts a consumer process with cfg (prefix and consumer name
// filled in) and waits until its router runs.
func (s *suite) startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	cfg.Prefix = s.n.Prefix
	cfg.Consumer = fmt.Sprintf("consumer-%d-%s", s.seq.Add(1), randomHex(3))
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	c := childproc.Start(t, cfg.Consumer, []string{childEnv + "=1", childConfigEnv + "=" + string(raw), "SURELY_REDIS_URL=" + s.url})
	c.WaitFor(t, 20*time.Second, "READY ")
	return c
}
