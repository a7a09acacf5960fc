package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/options"
)

// maxBatch is the largest batch WithBatching accepts.
const maxBatch = 4096

// WithBatching makes concurrent Claim and Complete calls share round trips
// (group commit): a call made while fewer than two round trips of the
// store's are in flight is sent at once, alone, exactly as without
// batching; calls made while two are in flight wait for one to return and
// are then sent together, at most n calls per round trip (the rest
// wait for the next one). There is no timer: an idle store adds no
// latency, and the window in which calls are gathered is the round trips
// already in flight.
//
// On a single node (a *redis.Client, Sentinel's failover client included)
// a batch is one run of a batch script that runs each call's own claim or
// complete code on its key: the store's behaviour does not change, only how
// many calls share a round trip and a script invocation; each caller gets
// its own result or error. On a Cluster or Ring client, whose scripts may
// only touch keys of one slot, a batch is a pipeline of one EVALSHA per
// call, which go-redis splits by node and sends to the nodes concurrently.
// New asks the server (INFO cluster) and uses the batch script only when it
// is not in cluster mode, so a cluster node reached through a plain
// *redis.Client gets pipelines too. Behind a proxy that shards keys
// (twemproxy, Envoy's Redis proxy) and answers INFO as a single server, a
// batch script would carry keys of several shards: do not batch there.
//
// A caller whose context ends while its call waits in the queue returns
// the context's error at once and its call is never sent; one whose context
// ends while its call is in flight also returns at once, without knowing
// whether the script ran (as when a connection breaks). The round trip
// itself is bounded by the client's read and write timeouts, not by any
// caller's context, since it carries the calls of several callers.
//
// Release, Extend, Get, and a Claim or Complete under WithWaitReplicas are
// always sent on their own. Batching suits many concurrent handlers on one store
// (a router with many messages in flight); with one handler at a time it
// changes nothing. n must be between 2 and 4096; 64 is a good start.
func WithBatching(n int) idempotency.Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		if n < 2 || n > maxBatch {
			return fmt.Errorf("%w: redisstore: batch size must be between 2 and %d, got %d",
				idempotency.ErrInvalidOption, maxBatch, n)
		}
		s.Put(optBatching, n)
		return nil
	})
}

// scriptCall is one script call: the script, its one key and its
// arguments. Claim and Complete build it once and either send it alone or
// hand it to the batcher.
type scriptCall struct {
	sc   *script
	key  string
	args []any
}

// send runs c, batched when the store batches.
func (s *Store) send(ctx context.Context, c scriptCall) (any, error) {
	if s.batch != nil {
		return s.batch.do(ctx, c)
	}
	return s.evalSha(ctx, s.client, c.sc, c.key, c.args...)
}

// batcher gathers the calls made while a round trip is in flight and sends
// them together as the next one. A flushing goroutine runs only while calls
// are queued or in flight, and ends when the queue is empty.
type batcher struct {
	s   *Store
	max int
	// oneScript: a batch is one run of the batch script (a single node),
	// not a pipeline of one script call per caller.
	oneScript bool

	mu       sync.Mutex
	queue    []*pending
	flushers int // flushing goroutines running, at most batchDepth
}

// batchDepth is how many round trips of a batching store may be in flight
// at once: while the server runs one batch, the client gathers and sends
// the next, and hands out the replies of the one before.
const batchDepth = 2

// pending is one queued call and, once done is closed, its reply.
type pending struct {
	ctx  context.Context
	call scriptCall
	done chan struct{}
	v    any
	err  error

	// sent and canceled are guarded by batcher.mu: a call is either taken
	// into a round trip or dropped by its canceled caller, never both.
	sent, canceled bool
}

func (b *batcher) do(ctx context.Context, c scriptCall) (any, error) {
	p := &pending{ctx: ctx, call: c, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	start := b.flushers < batchDepth
	if start {
		b.flushers++
	}
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case <-p.done:
		return p.v, p.err
	case <-ctx.Done():
		b.mu.Lock()
		if !p.sent {
			p.canceled = true // the flusher drops it
		}
		b.mu.Unlock()
		select {
		case <-p.done: // it finished meanwhile: the caller gets its reply
			return p.v, p.err
		default:
			return nil, ctx.Err()
		}
	}
}

// flush sends the queue, at most max calls per round trip, until it is
// empty.
func (b *batcher) flush() {
	for {
		batch := b.take()
		if len(batch) == 0 {
			return
		}
		b.roundTrip(batch)
		for _, p := range batch {
			close(p.done)
		}
	}
}

// take removes up to max live calls from the queue and marks them sent; on
// an empty queue it ends the flushing goroutine's turn.
func (b *batcher) take() []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*pending
	i := 0
	for ; i < len(b.queue) && len(batch) < b.max; i++ {
		p := b.queue[i]
		if p.canceled {
			continue
		}
		p.sent = true
		batch = append(batch, p)
	}
	n := copy(b.queue, b.queue[i:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	if len(batch) == 0 {
		b.flushers--
	}
	return batch
}

// roundTrip sends batch: a single call as a plain EVALSHA; more, on a
// single node, as one run of the batch script, elsewhere as one pipeline.
// The context keeps the first caller's values (for client hooks) but none
// of the callers' cancellation.
func (b *batcher) roundTrip(batch []*pending) {
	ctx := context.WithoutCancel(batch[0].ctx)
	if len(batch) == 1 {
		p := batch[0]
		p.v, p.err = b.s.evalSha(ctx, b.s.client, p.call.sc, p.call.key, p.call.args...)
		return
	}
	if b.oneScript {
		b.script(ctx, batch)
		return
	}
	noScript := b.pipeline(ctx, batch)
	if len(noScript) == 0 {
		return
	}
	// The server lost its script cache: reload once and re-send those calls.
	if err := b.s.reloadScripts(ctx); err != nil {
		for _, p := range noScript {
			p.v, p.err = nil, err
		}
		return
	}
	for _, p := range b.pipeline(ctx, noScript) {
		p.v, p.err = nil, fmt.Errorf("redisstore: NOSCRIPT after reload: %w", p.err)
	}
}

// script runs batch as one call of the batch script (lua/batch.lua), which
// runs each call's own script code on its key in turn and answers with
// every call's reply. Only a single node takes it: on a Cluster the keys
// would have to share a slot.
func (b *batcher) script(ctx context.Context, batch []*pending) {
	keys := make([]string, len(batch))
	n := 0
	for _, p := range batch {
		n += 2 + len(p.call.args)
	}
	args := make([]any, 0, n)
	for i, p := range batch {
		keys[i] = p.call.key
		args = append(args, p.call.sc.name, len(p.call.args))
		args = append(args, p.call.args...)
	}
	v, err := b.s.evalShaKeys(ctx, b.s.client, scriptBatch, keys, args...)
	replies, ok := v.([]any)
	if err == nil && (!ok || len(replies) != len(batch)) {
		err = fmt.Errorf("redisstore: batch: unexpected reply %v", v)
	}
	for i, p := range batch {
		if err != nil {
			p.v, p.err = nil, err
			continue
		}
		p.v, p.err = replies[i], batchError(replies[i])
		if p.err != nil {
			p.v = nil
		}
	}
}

// singleNode reports whether a batch may be one run of the batch script on
// client, whose keys may be in any slot: a *redis.Client whose server says
// it is not in cluster mode. A cluster node reached through a plain client
// (a managed cluster-mode endpoint, say) refuses a script whose keys are
// in different slots (CROSSSLOT), so there, as when INFO cannot be read, a
// batch is a pipeline.
func singleNode(ctx context.Context, client redis.UniversalClient) bool {
	c, ok := client.(*redis.Client)
	if !ok {
		return false
	}
	info, err := c.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:0")
}

// batchErrorTag marks the reply of a call that raised an error in the batch
// script: {batchErrorTag, message}. No claim or complete reply starts so.
const batchErrorTag = "surely-batch-error"

// batchError returns the error a batch script reply stands for, or nil.
func batchError(v any) error {
	switch v := v.(type) {
	case []any:
		if len(v) == 2 && v[0] == batchErrorTag {
			msg, _ := v[1].(string)
			return serverError(msg)
		}
	case error: // not written by the script; kept in case a server does
		return v
	}
	return nil
}

// serverError is the error a call of a batch got from the server (OOM,
// WRONGTYPE, ...): a redis.Error, as the same call's error would be
// unbatched, so that redis.HasErrorPrefix reads it alike.
type serverError string

func (e serverError) Error() string { return string(e) }

// RedisError marks serverError as a redis.Error.
func (serverError) RedisError() {}

var _ redis.Error = serverError("")

// pipeline sends batch as one pipeline, stores each call's reply and
// returns the calls the server answered with NOSCRIPT.
func (b *batcher) pipeline(ctx context.Context, batch []*pending) []*pending {
	cmds := make([]*redis.Cmd, len(batch))
	// The error of Pipelined is the first command's error; each command
	// keeps its own, read below.
	_, _ = b.s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range batch {
			cmds[i] = pipe.EvalSha(ctx, p.call.sc.sha, []string{p.call.key}, p.call.args...)
		}
		return nil
	})
	var noScript []*pending
	for i, p := range batch {
		p.v, p.err = cmds[i].Result()
		if p.err != nil && redis.HasErrorPrefix(p.err, "NOSCRIPT") {
			noScript = append(noScript, p)
		}
	}
	return noScript
}
