package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
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
type child struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line
	out    *lineWriter
	stderr *syncBuffer
	exited chan struct{}
	err    error // of Wait, valid after exited is closed
}

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

	c := &child{t: t, name: cfg.Consumer, lines: make(chan string, 4096), stderr: &syncBuffer{}, exited: make(chan struct{})}
	c.out = &lineWriter{lines: c.lines}
	// The test's context kills it at the latest when the test ends.
	c.cmd = exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", childConfigEnv+"="+string(raw), "SURELY_REDIS_URL="+s.url)
	c.cmd.Stdout = c.out
	c.cmd.Stderr = c.stderr
	// The child exits when its stdin closes: a parent that dies (test
	// timeout) leaves no consumer behind.
	c.stdin, err = c.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, c.cmd.Start())
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("child %s stdout:\n%s\nstderr:\n%s", c.name, c.out.all(), c.stderr.String())
		}
	})
	c.waitFor(t, 20*time.Second, "READY ")
	return c
}

// kill SIGKILLs the child (no-op once it has exited) and reaps it.
func (c *child) kill() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill() // SIGKILL: no deferred code, no graceful close
		<-c.exited
	}
	_ = c.stdin.Close()
}

// waitFor reads the child's stdout until a line starting with one of
// prefixes and returns it. It fails the test when the child exits first or
// timeout passes.
func (c *child) waitFor(t *testing.T, timeout time.Duration, prefixes ...string) string {
	t.Helper()
	match := func(line string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				return true
			}
		}
		return false
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line := <-c.lines:
			if match(line) {
				return line
			}
		case <-c.exited:
			// Wait returned, so every line it printed is in c.lines.
			for drained := false; !drained; {
				select {
				case line := <-c.lines:
					if match(line) {
						return line
					}
				default:
					drained = true
				}
			}
			t.Fatalf("child %s exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s",
				c.name, c.err, prefixes, c.out.all(), c.stderr.String())
		case <-timer.C:
			t.Fatalf("child %s did not print %q within %v\nstdout:\n%s\nstderr:\n%s",
				c.name, prefixes, timeout, c.out.all(), c.stderr.String())
		}
	}
}

// lineWriter splits a child's stdout into lines, keeping them all for the
// failure log and handing each to waitFor.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	seen  []string
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		w.seen = append(w.seen, line)
		select {
		case w.lines <- line:
		default: // nobody reads that far behind; the line is still in seen
		}
	}
}

func (w *lineWriter) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.seen, "\n")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
