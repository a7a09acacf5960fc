package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/retry"
)

// childEnv holds the JSON childConfig of a consumer process: its presence
// is what makes this program (or the test binary) a consumer.
const childEnv = "SURELY_CHAOS_CHILD"

// Lines a consumer prints on stdout for the parent.
const (
	lineReady  = "READY"  // READY <pid>: subscribed
	linePause  = "PAUSE"  // PAUSE <key> <token>: at the pause point, waiting to be stopped
	lineFenced = "FENCED" // FENCED <key>: a stale attempt was refused by the store
)

// Consumer settings.
const (
	lease = 2 * time.Second
	// maxAttempts is the durable attempt budget: every claim counts, those
	// of killed consumers too, so it must exceed the kills and pauses one
	// operation can be in flight for.
	maxAttempts = 50
	// work is the time an operation takes before its effect, so that kills
	// land inside handlers.
	work = 2 * time.Millisecond
	// pauseHold bounds how long a delivery waits at the pause point for the
	// parent's SIGSTOP and SIGCONT.
	pauseHold = time.Minute
	// consumerStoreTimeout bounds each store call (handler.WithStoreTimeout):
	// shorter than the lease, as handler.New requires, and longer than the
	// slow store's delay (slowStoreDelay + slowStoreJitter), so a slow store
	// slows calls down without failing them.
	consumerStoreTimeout = 1500 * time.Millisecond
	// childMaxLife ends a consumer whose parent forgot it.
	childMaxLife = 30 * time.Minute // unless MaxLifeMs says longer (a soak)
)

// Kinds of operations (the "kind" field of the payload).
const (
	kindOK        = "ok"
	kindPoison    = "poison"    // permanent error: dead letter
	kindTransient = "transient" // fails on its first attempt
)

// payload is an operation as published.
type payload struct {
	Key  string `json:"key"`
	Kind string `json:"kind"`
	At   int64  `json:"at,omitempty"` // publish time, Unix nanoseconds
}

// childConfig is what the parent tells a consumer process.
type childConfig struct {
	Mode       string `json:"mode"`
	Broker     string `json:"broker"`
	BrokerURL  string `json:"broker_url"`
	StoreRedis string `json:"store_redis,omitempty"` // lease mode: host:port of the private redis-server
	// Lease mode with -failover: the Sentinels' host:port and the name
	// of the monitored primary; WaitReplicas > 0 makes Complete wait for
	// that many replicas (redisstore.WithWaitReplicas).
	StoreSentinels []string `json:"store_sentinels,omitempty"`
	StoreMaster    string   `json:"store_master,omitempty"`
	WaitReplicas   int      `json:"wait_replicas,omitempty"`
	// StoreDial maps a Redis server's address, as the Sentinels name it,
	// to the address to dial instead: this consumer's proxy to it (-net).
	StoreDial map[string]string `json:"store_dial,omitempty"`
	// StatsEveryMs > 0: print a STATS line that often.
	StatsEveryMs int `json:"stats_every_ms,omitempty"`
	// MaxLifeMs, when longer than childMaxLife, bounds the process instead.
	MaxLifeMs   int64  `json:"max_life_ms,omitempty"`
	Effects     string `json:"effects"`
	EffectsDSN  string `json:"effects_dsn"`
	Suffix      string `json:"suffix"`
	Concurrency int    `json:"concurrency"`
}

// childMain runs a consumer process until SIGINT, a closed stdin (the
// parent is gone) or SIGKILL, and returns its exit status.
func childMain(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "consumer: %s: %v\n", childEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	life := childMaxLife
	if d := time.Duration(cfg.MaxLifeMs) * time.Millisecond; d > life {
		life = d
	}
	ctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	go func() {
		// The parent holds our stdin open; EOF means it is gone.
		r := bufio.NewReader(os.Stdin)
		for {
			if _, err := r.ReadByte(); err != nil {
				cancel()
				return
			}
		}
	}()
	if err := runConsumer(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	return 0
}

// consumer is one consumer process's state.
type consumer struct {
	cfg   childConfig
	n     names
	db    *effectsDB
	pid   int
	armed atomic.Bool // SIGUSR1: pause at the next pause point; SIGUSR2: don't
	cont  chan os.Signal
	// tokens holds, by delivery (*message.Message: the chain hands the
	// same one to the handler and to OnOutcome), the token of its latest
	// attempt that reached its effect, for the ACKED line of
	// OutcomeProcessed; OnOutcome removes it whatever the outcome.
	tokens sync.Map
}

func runConsumer(ctx context.Context, cfg childConfig) error {
	c := &consumer{cfg: cfg, n: newNames(cfg.Suffix), pid: os.Getpid()}
	var err error
	if c.db, err = openEffects(ctx, cfg.Effects, cfg.EffectsDSN, c.n); err != nil {
		return err
	}
	defer func() { _ = c.db.db.Close() }()

	c.cont = make(chan os.Signal, 1)
	signal.Notify(c.cont, syscall.SIGCONT)
	defer signal.Stop(c.cont)
	usr1, usr2 := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr1)
	defer signal.Stop(usr2)
	go func() {
		for {
			select {
			case <-usr1:
				c.armed.Store(true)
			case <-usr2:
				c.armed.Store(false)
			case <-ctx.Done():
				return
			}
		}
	}()

	var (
		store idempotency.Store
		fn    message.HandlerFunc
	)
	switch cfg.Mode {
	case modeLease:
		var client *redis.Client
		if len(cfg.StoreSentinels) > 0 {
			client = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.StoreMaster, SentinelAddrs: cfg.StoreSentinels,
				MaxRetries: 2, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					if a, ok := cfg.StoreDial[addr]; ok {
						addr = a
					}
					d := net.Dialer{Timeout: time.Second, KeepAlive: 5 * time.Minute}
					return d.DialContext(ctx, network, addr)
				}})
		} else {
			client = redis.NewClient(&redis.Options{Addr: cfg.StoreRedis, MaxRetries: 2,
				DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
		}
		defer func() { _ = client.Close() }()
		var opts []idempotency.Option
		if cfg.WaitReplicas > 0 {
			opts = append(opts, redisstore.WithWaitReplicas(cfg.WaitReplicas, waitReplicasTimeout))
		}
		rs, err := newRedisStore(ctx, client, c.n, opts...)
		if err != nil {
			return err
		}
		store, fn = rs, c.leaseHandler
	default:
		ss, err := sqlstore.New(c.db.db, c.db.dialect(), sqlstore.WithTable(c.n.inbox), sqlstore.WithInTxClaims())
		if err != nil {
			return err
		}
		store, fn = ss, c.inboxHandler(ss)
	}

	pub, err := newPublisher(cfg.Broker, cfg.BrokerURL, "surely-chaos consumer "+strconv.Itoa(c.pid))
	if err != nil {
		return fmt.Errorf("dead-letter publisher: %w", err)
	}
	defer func() { _ = pub.Close() }() // after the router: the chain publishes dead letters through it

	h, err := c.chain(store, fn, pub)
	if err != nil {
		return err
	}
	var wmLogger watermill.LoggerAdapter = watermill.NopLogger{}
	if os.Getenv(debugEnv) != "" {
		wmLogger = watermill.NewSlogLogger(c.logger())
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, wmLogger)
	if err != nil {
		return err
	}
	// Redis Streams hands out one entry at a time per subscription: one
	// subscriber per unit of concurrency. The others take it as a setting.
	subs := 1
	conc := cfg.Concurrency
	if cfg.Broker == brokerRedis {
		subs, conc = cfg.Concurrency, 1
	}
	for i := range subs {
		sub, err := newSubscriber(cfg.Broker, cfg.BrokerURL, c.n.group, "surely-chaos consumer "+strconv.Itoa(c.pid), conc)
		if err != nil {
			return err
		}
		router.AddConsumerHandler(fmt.Sprintf("chaos-%d", i), c.n.topic, sub, handler.NoPublish(h))
	}
	go func() {
		select {
		case <-router.Running():
			fmt.Println(lineReady, c.pid)
		case <-ctx.Done():
		}
	}()
	if cfg.StatsEveryMs > 0 {
		go printStats(ctx, time.Duration(cfg.StatsEveryMs)*time.Millisecond)
	}
	return router.Run(ctx)
}

// newRedisStore retries while the private Redis restarts.
func newRedisStore(ctx context.Context, client *redis.Client, n names, opts ...idempotency.Option) (*redisstore.Store, error) {
	deadline := time.Now().Add(serverReady)
	opts = append([]idempotency.Option{redisstore.WithPrefix(n.redisPrefix)}, opts...)
	for {
		s, err := redisstore.New(ctx, client, opts...)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return s, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chain is handler.New around fn, with the run's policy.
func (c *consumer) chain(store idempotency.Store, fn message.HandlerFunc, pub message.Publisher) (message.HandlerFunc, error) {
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(maxAttempts), retry.WithInProcessAttempts(3),
		retry.WithBackoff(10*time.Millisecond, 200*time.Millisecond), retry.WithMaxInProcessTime(lease/2))
	if err != nil {
		return nil, err
	}
	extractor, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromJSONField("key")))
	if err != nil {
		return nil, err
	}
	return handler.New(fn,
		handler.WithStore(store, c.n.namespace),
		handler.WithDeadLetter(pub, c.n.deadTopic),
		handler.WithPolicy(policy),
		handler.WithIdentity(extractor, handler.RejectMissingKey),
		handler.WithLease(lease),
		handler.WithStoreTimeout(consumerStoreTimeout),
		handler.WithConsumerGroup(c.n.group),
		handler.WithLogger(c.logger()),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			token, ran := c.tokens.LoadAndDelete(p.Msg)
			switch p.Outcome {
			case handler.OutcomeLeaseLost:
				c.fenced(p.Msg)
			case handler.OutcomeProcessed:
				if ran {
					c.acked(p.Msg, token.(string))
				}
			}
			return handler.OutcomeResult{}
		}),
	)
}

// debugEnv, when set, makes the consumers log to stderr.
const debugEnv = "SURELY_CHAOS_DEBUG"

func (c *consumer) logger() *slog.Logger { return debugLogger() }

// debugLogger logs to stderr when debugEnv is set, else nothing.
func debugLogger() *slog.Logger {
	if os.Getenv(debugEnv) == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// before is what every attempt does before its effect: decode, fail as the
// operation's kind says, work a little.
func (c *consumer) before(msg *message.Message) (payload, *opctx.Op, error) {
	var p payload
	if err := json.Unmarshal(msg.Payload, &p); err != nil {
		return p, nil, retry.Permanent(fmt.Errorf("malformed operation: %w", err))
	}
	op, ok := opctx.From(msg.Context())
	if !ok {
		return p, nil, errors.New("no operation in the context")
	}
	switch p.Kind {
	case kindPoison:
		return p, op, retry.Permanent(fmt.Errorf("operation %s is poison", p.Key))
	case kindTransient:
		if op.Attempt == 1 {
			return p, op, fmt.Errorf("operation %s: transient failure of attempt 1", p.Key)
		}
	}
	time.Sleep(work)
	return p, op, nil
}

// leaseHandler does the effect outside the store: one transaction of the
// effects database with the effect and its marker (key, token, process),
// then the pause point; Complete follows in the dedup step.
func (c *consumer) leaseHandler(msg *message.Message) ([]*message.Message, error) {
	p, op, err := c.before(msg)
	if err != nil {
		return nil, err
	}
	ctx := msg.Context()
	tx, err := c.db.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, c.db.effectSQL(), p.Key); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, c.db.markerSQL(), p.Key, op.Token, c.pid); err != nil {
		return nil, err
	}
	c.tokens.Store(msg, op.Token)
	if err := tx.Commit(); err != nil {
		// The server may have committed before the link failed: the
		// effect may be there, with its marker.
		fmt.Println(lineUnsure, p.Key, op.Token)
		return nil, err
	}
	// Effect done, Complete pending: lease mode's window.
	c.pausePoint(p.Key, op.Token)
	return nil, nil
}

// inboxHandler does the effect inside the inbox transaction. The pause
// point is before it, after the claim: a stopped owner's transaction must
// find the record taken over.
func (c *consumer) inboxHandler(store *sqlstore.Store) message.HandlerFunc {
	inbox := store.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		var p payload
		_ = json.Unmarshal(msg.Payload, &p) // decoded before
		_, err := tx.ExecContext(ctx, c.db.effectSQL(), p.Key)
		return nil, err
	})
	return func(msg *message.Message) ([]*message.Message, error) {
		p, op, err := c.before(msg)
		if err != nil {
			return nil, err
		}
		// Once the inbox claims in its transaction (opctx.InTxClaims),
		// the pause point is before the claim: a stopped delivery has none
		// yet, and on resuming it finds the operation another consumer
		// completed (no effect), which is its fencing.
		dc := op.Deferred
		c.pausePoint(p.Key, op.Token)
		msgs, err := inbox(msg)
		// The lease the effect committed under: the inbox's own claim when
		// the claim was left to it, else the dedup step's.
		token := op.Token
		if dc != nil && dc.Made && dc.Result.Status == idempotency.Acquired {
			token = dc.Result.Lease.Token
		}
		c.tokens.Store(msg, token)
		if errors.Is(err, idempotency.ErrLeaseLost) ||
			(dc != nil && dc.Made && dc.Result.Status == idempotency.Completed) {
			c.fenced(msg)
		}
		return msgs, err
	}
}

// pausePoint: when armed, the first delivery to get here prints its key
// and waits until the parent has stopped (SIGSTOP) and resumed (SIGCONT)
// the process.
func (c *consumer) pausePoint(key, token string) {
	if !c.armed.CompareAndSwap(true, false) {
		return
	}
	select {
	case <-c.cont: // an old one
	default:
	}
	if token == "" {
		token = "-" // no claim yet (see inboxHandler): a field all the same
	}
	fmt.Println(linePause, key, token) // stdout is unbuffered
	select {
	case <-c.cont:
	case <-time.After(pauseHold):
	}
}

func (c *consumer) fenced(msg *message.Message) {
	var p payload
	_ = json.Unmarshal(msg.Payload, &p)
	fmt.Println(lineFenced, p.Key)
}

// waitReplicasTimeout bounds the WAIT of a Complete with -wait-replicas.
const waitReplicasTimeout = 2 * time.Second

// acked prints the ACKED line of a processed operation: its Complete
// returned nil.
func (c *consumer) acked(msg *message.Message, token string) {
	var p payload
	_ = json.Unmarshal(msg.Payload, &p)
	var us int64
	if p.At > 0 {
		us = time.Since(time.Unix(0, p.At)).Microseconds()
	}
	fmt.Println(lineAcked, p.Key, token, us)
}

// printStats prints a STATS line every d until ctx ends.
func printStats(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Println(lineStats, runtime.NumGoroutine(), rssKiB(), ms.HeapInuse/1024)
	}
}

// rssKiB is the resident set size of this process (Linux), 0 elsewhere.
func rssKiB() int {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}
