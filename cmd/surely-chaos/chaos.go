package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// Bounds of the parent's waits.
const (
	tick            = 20 * time.Millisecond
	soakTick        = 250 * time.Millisecond
	pauseReach      = 15 * time.Second // an armed consumer reaches its pause point
	pauseTries      = 3                // consumers tried in turn for one pause
	pauseTakeover   = 30 * time.Second // another consumer completes the paused operation
	fenceReport     = 20 * time.Second // the resumed consumer reports its fenced attempt
	publishRetryFor = 60 * time.Second // a publish keeps failing (broker restarting)
	publishBatch    = 100
	publishWorkers  = 4
)

// result is what a run found.
type result struct {
	mode, broker                   string
	ops, kills, redisRestarts      int
	brokerRestarts, pauses, fenced int
	pausesTakenOver                int
	lost, double                   int
	deadLettered, dlqExpected      int
	unexpectedDead                 int // dead-lettered operations that were not poison
	windows, killsInWindow         int
	windowKills                    int // kills that left at least one window
	completeFailed                 int
	windowViolations               int
	markerMismatch                 int // keys whose markers and effects disagree (lease mode)
	consumerExits                  int
	settled                        bool

	net          map[string]int // network faults injected, by kind (-net)
	commitUnsure int            // lease: extra effects explained by a COMMIT that failed after the server applied it
	leaseLost    int            // attempts the store refused (fenced): a lease given up or taken over
	// -failover
	failovers, promoteMs        int
	waitReplicas                bool
	ackedChecked, ackedLost     int // acknowledged (key, token) pairs checked after the run, and those whose record was lost
	lostRerun, lostForgotten    int // of ackedLost: the operation ran again / its record is just gone
	lostCompletionWindows       int // effects whose acknowledged Complete the failover forgot (each may double)
	latency                     percentiles
	soak                        bool
	growth                      []growth
	rssGrowthMax, goroutGrowMax float64
	goroutGrowAbs               float64 // the largest growth in goroutines (window means)
	skipFlat                    bool
}

// line is the one line printed on stdout.
func (r result) line() string {
	return fmt.Sprintf("chaos: mode=%s broker=%s ops=%d kills=%d redis_restarts=%d lost=%d double_effects=%d dead_lettered=%d dlq_expected=%d"+
		" broker_restarts=%d pauses=%d fenced=%d windows=%d window_kills=%d kills_in_window=%d complete_failed=%d window_violations=%d",
		r.mode, r.broker, r.ops, r.kills, r.redisRestarts, r.lost, r.double, r.deadLettered, r.dlqExpected,
		r.brokerRestarts, r.pauses, r.fenced, r.windows, r.windowKills, r.killsInWindow, r.completeFailed, r.windowViolations) + r.extra()
}

// extra is the result line's fields of -net, -failover and soaks.
func (r result) extra() string {
	var b strings.Builder
	if r.net != nil {
		total := 0
		for _, k := range netKinds {
			fmt.Fprintf(&b, " net_%s=%d", k, r.net[k])
			total += r.net[k]
		}
		fmt.Fprintf(&b, " net_faults=%d commit_unsure=%d lease_lost=%d", total, r.commitUnsure, r.leaseLost)
	}
	if r.failovers > 0 || r.mode == modeLease && r.waitReplicas {
		fmt.Fprintf(&b, " failovers=%d promote_ms=%d wait_replicas=%t lost_completion_windows=%d", r.failovers, r.promoteMs, r.waitReplicas, r.lostCompletionWindows)
	}
	fmt.Fprintf(&b, " acked_checked=%d acked_lost=%d lost_rerun=%d lost_forgotten=%d", r.ackedChecked, r.ackedLost, r.lostRerun, r.lostForgotten)
	if r.latency.n > 0 {
		b.WriteString(" " + r.latency.String())
	}
	if r.soak {
		fmt.Fprintf(&b, " consumers_sampled=%d rss_growth_max_pct=%.1f goroutine_growth_max_pct=%.1f", len(r.growth), 100*r.rssGrowthMax, 100*r.goroutGrowMax)
	}
	return b.String()
}

// problems lists what makes the run fail.
func (r result) problems() []string {
	var p []string
	if !r.settled {
		p = append(p, "not every operation settled before the timeout")
	}
	if r.lost > 0 {
		p = append(p, fmt.Sprintf("%d operations lost (neither effected nor dead-lettered)", r.lost))
	}
	if r.deadLettered != r.dlqExpected || r.unexpectedDead > 0 {
		p = append(p, fmt.Sprintf("%d operations dead-lettered, %d poison ones expected (%d not poison)", r.deadLettered, r.dlqExpected, r.unexpectedDead))
	}
	if r.mode == modeInbox && r.double > 0 {
		p = append(p, fmt.Sprintf("%d operations effected twice in inbox mode", r.double))
	}
	if r.mode == modeLease && (r.double > r.windows || r.windowViolations > 0) {
		p = append(p, fmt.Sprintf("%d double effects in lease mode, %d effect-complete windows, %d keys with more extra effects than windows",
			r.double, r.windows, r.windowViolations))
	}
	if r.markerMismatch > 0 {
		p = append(p, fmt.Sprintf("%d keys whose markers disagree with their effect count", r.markerMismatch))
	}
	if r.ackedLost > 0 && (r.failovers == 0 || r.waitReplicas) {
		p = append(p, fmt.Sprintf("%d acknowledged completions lost (no failover without WAIT to explain them)", r.ackedLost))
	}
	if r.soak && !r.skipFlat {
		if len(r.growth) == 0 {
			p = append(p, "no consumer was sampled over the whole soak")
		}
		if r.rssGrowthMax > soakFlat || r.goroutGrowMax > soakFlat && r.goroutGrowAbs > soakGoroutineSlack {
			p = append(p, fmt.Sprintf("a consumer grew after warm-up: resident memory %+.1f %%, goroutines %+.1f %% (at most %.0f %%)",
				100*r.rssGrowthMax, 100*r.goroutGrowMax, 100*soakFlat))
		}
	}
	if r.fenced < r.pausesTakenOver {
		p = append(p, fmt.Sprintf("%d paused consumers were taken over, only %d reported their stale attempt fenced", r.pausesTakenOver, r.fenced))
	}
	return p
}

// op is one published operation.
type op struct {
	key, kind string
}

// recordGetter is the part of a store the parent reads.
type recordGetter interface {
	Get(ctx context.Context, namespace, key string) (idempotency.Record, error)
}

// run is the parent: it sets everything up, publishes, injects the faults
// while the consumers work, waits for quiescence, counts and cleans up. It
// prints the result line on cfg.stdout (also when the checks fail) and
// returns an error only when the run itself could not be carried out.
func run(ctx context.Context, cfg config) (res result, err error) {
	log := &logger{w: cfg.stderr, start: time.Now()}
	res = result{mode: cfg.mode, broker: cfg.broker, ops: cfg.ops}
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	rnd := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	n := newNames(randomSuffix())
	dir, err := os.MkdirTemp("", "surely-chaos-"+n.suffix+"-")
	if err != nil {
		return res, err
	}
	var cleanups []func() error // run in reverse order
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i]())
		}
		err = errors.Join(err, os.RemoveAll(dir))
	}()
	log.say("run %s: mode=%s broker=%s effects=%s ops=%d seed=%d", n.suffix, cfg.mode, cfg.broker, cfg.effects, cfg.ops, cfg.seed)

	// The effects database (and the inbox's).
	dsn := cfg.postgresURL
	if cfg.effects == effectsSQLite {
		dsn = sqliteDSN(filepath.Join(dir, "effects.db"))
	}
	db, err := openEffects(ctx, cfg.effects, dsn, n)
	if err != nil {
		return res, err
	}
	cleanups = append(cleanups, func() error { return db.db.Close() })
	cleanups = append(cleanups, db.drop)
	if err := db.create(ctx); err != nil {
		return res, err
	}

	// The store, read by the parent to follow pauses and resolve markers.
	var (
		getter  recordGetter
		redisSv *redisServer
		ha      *redisHA
		px      *proxies
	)
	if cfg.net || cfg.failover {
		px = newProxies()
	}
	res.waitReplicas = cfg.failover && cfg.waitReplicas
	child := childConfig{Mode: cfg.mode, Broker: cfg.broker, Effects: cfg.effects, EffectsDSN: dsn,
		Suffix: n.suffix, Concurrency: cfg.concurrency, StatsEveryMs: int(cfg.statsEvery.Milliseconds()),
		MaxLifeMs: (cfg.timeout + 5*time.Minute).Milliseconds()}
	switch {
	case cfg.mode == modeLease && cfg.failover:
		if ha, err = startRedisHA(ctx, filepath.Join(dir, "redis"), px); err != nil {
			return res, err
		}
		cleanups = append(cleanups, func() error { ha.stop(); return nil })
		client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: ha.sentinelAddrs(), MaxRetries: 5})
		cleanups = append(cleanups, client.Close)
		rs, err := redisstore.New(ctx, client, redisstore.WithPrefix(n.redisPrefix))
		if err != nil {
			return res, err
		}
		log.say("store: redis-server primary %s, replica %s (replicating through a proxy), Sentinels %v; Complete waits for the replica: %t",
			ha.primary.addr, ha.replica.addr, ha.sentinelAddrs(), res.waitReplicas)
		getter, child.StoreSentinels, child.StoreMaster = rs, ha.sentinelAddrs(), sentinelMaster
		if res.waitReplicas {
			child.WaitReplicas = 1
		}
	case cfg.mode == modeLease:
		if err := os.Mkdir(filepath.Join(dir, "redis"), 0o700); err != nil {
			return res, err
		}
		if redisSv, err = startRedisServer(filepath.Join(dir, "redis")); err != nil {
			return res, err
		}
		cleanups = append(cleanups, func() error { redisSv.stop(); return nil })
		client := redis.NewClient(&redis.Options{Addr: redisSv.addr, MaxRetries: 5})
		cleanups = append(cleanups, client.Close)
		rs, err := redisstore.New(ctx, client, redisstore.WithPrefix(n.redisPrefix))
		if err != nil {
			return res, err
		}
		log.say("store: private redis-server on %s (AOF appendfsync %s), key prefix %s", redisSv.addr, rs.Durability().AppendFsync, n.redisPrefix)
		getter, child.StoreRedis = rs, redisSv.addr
	default: // inbox
		ss, err := sqlstore.New(db.db, db.dialect(), sqlstore.WithTable(n.inbox))
		if err != nil {
			return res, err
		}
		if err := ss.Migrate(ctx); err != nil {
			return res, err
		}
		log.say("store: %s transactional inbox, table %s", cfg.effects, n.inbox)
		getter = ss
	}

	// The broker.
	var natsSv *natsServer
	switch cfg.broker {
	case brokerNATS:
		if natsSv, err = startNATSServer(filepath.Join(dir, "nats")); err != nil {
			return res, err
		}
		cleanups = append(cleanups, func() error { natsSv.stop(); return nil })
		child.BrokerURL = natsSv.url
		log.say("broker: embedded NATS JetStream on %s, stream %s", natsSv.url, n.stream)
	case brokerRabbitMQ:
		child.BrokerURL = cfg.amqpURL
		log.say("broker: shared RabbitMQ, queues %s and %s; a shared server is never restarted: broker_restarts=0", n.topic, n.deadTopic)
	default:
		child.BrokerURL = cfg.redisURL
		log.say("broker: shared Redis Streams, streams %s and %s; a shared server is never restarted: broker_restarts=0", n.topic, n.deadTopic)
	}
	if err := checkBroker(ctx, cfg.broker, child.BrokerURL); err != nil {
		return res, err
	}
	if err := prepareBroker(ctx, cfg.broker, child.BrokerURL, n); err != nil {
		return res, err
	}
	cleanups = append(cleanups, func() error { return cleanupBroker(cfg.broker, child.BrokerURL, n) })

	// Dead letters, collected by the parent.
	dead := newDeadLetters()
	deadSub, err := newSubscriber(cfg.broker, child.BrokerURL, n.deadGroup, "surely-chaos dead letters", 16)
	if err != nil {
		return res, err
	}
	deadCtx, stopDead := context.WithCancel(context.Background())
	deadDone := make(chan struct{})
	cleanups = append(cleanups, func() error {
		stopDead()
		err := deadSub.Close()
		<-deadDone
		return err
	})
	deadCh, err := deadSub.Subscribe(deadCtx, n.deadTopic)
	if err != nil {
		close(deadDone)
		return res, fmt.Errorf("subscribe to the dead letters: %w", err)
	}
	go func() {
		defer close(deadDone)
		for msg := range deadCh {
			dead.add(msg.Metadata.Get(dlq.KeyOperationKey), msg.Metadata.Get(dlq.KeyReason))
			msg.Ack()
		}
	}()

	// The consumers.
	cs, err := newChildren(exe, cfg.childArgs, child, log, cfg.logChildren)
	if err != nil {
		return res, err
	}
	var nc *netChaos
	if cfg.net {
		links, storeLinks, err := netLinks(child, ha)
		if err != nil {
			return res, err
		}
		cs.links = links(px)
		nc = &netChaos{storeLinks: storeLinks, storeDelay: consumerStoreTimeout, counts: map[string]int{}}
		log.say("net: every consumer reaches %s through proxies of its own", strings.Join(linkNames(child), ", "))
	}
	cleanups = append(cleanups, func() error { cs.stopAll(); return nil })
	for range cfg.consumers {
		if _, err := cs.start(); err != nil {
			return res, err
		}
	}

	// The operations, published in the background.
	ops := makeOps(rnd, n.suffix, cfg)
	for _, o := range ops {
		if o.kind == kindPoison {
			res.dlqExpected++
		}
	}
	pub, err := newPublisher(cfg.broker, child.BrokerURL, "surely-chaos publisher")
	if err != nil {
		return res, err
	}
	cleanups = append(cleanups, pub.Close)
	published := make(chan error, 1)
	go func() { published <- publish(ctx, pub, n.topic, ops, cfg.rate, cfg.duration > 0) }()

	// Faults, by progress, until everything is settled.
	plan := makePlan(rnd, cfg)
	log.say("plan: %d kills, %d redis restarts, %d broker restarts, %d pauses, %d failovers over %d ops, %d consumers × %d in flight, network faults: %t",
		cfg.kills, cfg.redisRestarts, cfg.brokerRestarts, cfg.pauses, b2i(cfg.failover), cfg.ops, cfg.consumers, cfg.concurrency, cfg.net)
	f := &faults{cfg: cfg, log: log, rnd: rnd, cs: cs, getter: getter, ns: n.namespace, redis: redisSv, nats: natsSv, ha: ha, res: &res}
	f.reach, f.stopReach = context.WithCancel(ctx)
	defer f.stopReach()
	netCtx, stopNet := context.WithCancel(ctx)
	netDone := make(chan struct{})
	if nc != nil {
		nc.f = f
		go func() {
			defer close(netDone)
			nc.loop(netCtx)
		}()
	} else {
		close(netDone)
	}
	stopNetFaults := func() {
		stopNet()
		<-netDone // bounded: a fault's hold ends with netCtx
	}
	defer stopNetFaults()
	started := time.Now()
	publishDone := false
	allDone := false // every operation effected or dead-lettered; it stays so
	progress := 0
	for {
		if !publishDone {
			select {
			case err := <-published:
				if err != nil {
					return res, err
				}
				publishDone = true
				log.say("published %d operations (%d poison, %d transient)", len(ops), res.dlqExpected, countKind(ops, kindTransient))
			default:
			}
		}
		if effected, err := db.effected(ctx); err == nil {
			progress = effected + dead.count()
		} else if ctx.Err() == nil {
			return res, err
		}
		for len(plan) > 0 && plan[0].at <= progress && ctx.Err() == nil {
			if err := f.do(ctx, plan[0].what, progress); err != nil {
				return res, err
			}
			plan = plan[1:]
		}
		if _, err := cs.restartExited(); err != nil {
			return res, err
		}
		if publishDone && len(plan) == 0 && progress >= cfg.ops {
			if !allDone {
				var err error
				if allDone, err = allSettled(ctx, db, dead, ops); err != nil {
					return res, err
				}
			}
			if allDone {
				// Nothing is left to deliver: a consumer armed for a
				// pause can no longer reach its pause point.
				f.stopReach()
				stopNetFaults()
				if f.idle() {
					res.settled = true
					break
				}
			}
		}
		if ctx.Err() != nil {
			log.say("stopped (%v): %d of %d operations settled, %d faults not injected", context.Cause(ctx), progress, cfg.ops, len(plan))
			break
		}
		if cfg.duration > 0 {
			time.Sleep(soakTick) // a long run: count less often
		} else {
			time.Sleep(tick)
		}
	}
	f.wg.Wait() // bounded: every wait of a pause is
	if res.settled {
		log.say("all %d operations settled %v after the start; waiting %v for late redeliveries", cfg.ops,
			time.Since(started).Round(100*time.Millisecond), cfg.settleGrace)
		time.Sleep(cfg.settleGrace)
	}
	stopNetFaults()
	if nc != nil {
		res.net = nc.summary()
	}
	cs.stopAll()
	res.consumerExits += cs.exits
	res.latency = cs.rep.latency()
	res.leaseLost = cs.rep.fencedCount()
	if cfg.duration > 0 {
		res.soak, res.skipFlat = true, cfg.skipFlat
		soakFigures(&res, cs.rep, cfg, time.Since(started), log)
	}

	// Count, with a deadline of its own: the run's may be over.
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ccancel()
	if err := tally(cctx, &res, db, getter, n.namespace, cs, dead, ops, log); err != nil {
		return res, err
	}
	if err := checkAcked(cctx, &res, getter, n.namespace, cs.rep, db, log); err != nil {
		return res, err
	}
	if ha != nil {
		if now, err := ha.masterAddr(cctx); err != nil {
			log.say("store at the end: %v", err)
		} else {
			log.say("store at the end: the Sentinels name %s the primary; first primary %s, first replica %s", now, ha.primary.addr, ha.replica.addr)
		}
	}
	log.say("took %v; consumers exited on their own: %d", time.Since(started).Round(100*time.Millisecond), res.consumerExits)
	_, _ = fmt.Fprintln(cfg.stdout, res.line())
	return res, nil
}

// makeOps returns the operations: unique keys, and kinds spread at random
// in fixed numbers.
func makeOps(rnd *rand.Rand, suffix string, cfg config) []op {
	ops := make([]op, cfg.ops)
	for i := range ops {
		ops[i] = op{key: fmt.Sprintf("op-%s-%06d", suffix, i), kind: kindOK}
	}
	poison := int(math.Round(float64(cfg.ops) * cfg.poison))
	transient := int(math.Round(float64(cfg.ops) * cfg.transient))
	for i, j := range rnd.Perm(cfg.ops)[:poison+transient] {
		if i < poison {
			ops[j].kind = kindPoison
		} else {
			ops[j].kind = kindTransient
		}
	}
	return ops
}

func countKind(ops []op, kind string) int {
	n := 0
	for _, o := range ops {
		if o.kind == kind {
			n++
		}
	}
	return n
}

// publish publishes ops from a few goroutines in batches, retrying a batch
// while the broker does not take it (a restart); paced, it publishes rate
// operations a second, a tenth of them every 100 ms.
func publish(ctx context.Context, pub message.Publisher, topic string, ops []op, rate int, paced bool) error {
	if paced {
		return publishPaced(ctx, pub, topic, ops, rate)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	batches := make(chan []op)
	for range publishWorkers {
		wg.Go(func() {
			for b := range batches {
				msgs := make([]*message.Message, len(b))
				for i, o := range b {
					body, _ := json.Marshal(payload{Key: o.key, Kind: o.kind, At: time.Now().UnixNano()}) // cannot fail
					msgs[i] = message.NewMessage(watermill.NewUUID(), body)
				}
				if err := publishRetrying(ctx, pub, topic, msgs); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < len(ops); i += publishBatch {
		select {
		case batches <- ops[i:min(i+publishBatch, len(ops))]:
		case <-ctx.Done():
		}
	}
	close(batches)
	wg.Wait()
	return errors.Join(errs...)
}

func publishPaced(ctx context.Context, pub message.Publisher, topic string, ops []op, rate int) error {
	const every = 100 * time.Millisecond
	per := max(1, rate/10)
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	for i := 0; i < len(ops); {
		// Catch up after a slow publish, so that the rate holds on average.
		due := min(len(ops), int(time.Since(start)/every+1)*per)
		if due > i {
			msgs := make([]*message.Message, 0, due-i)
			for _, o := range ops[i:due] {
				body, _ := json.Marshal(payload{Key: o.key, Kind: o.kind, At: time.Now().UnixNano()}) // cannot fail
				msgs = append(msgs, message.NewMessage(watermill.NewUUID(), body))
			}
			if err := publishRetrying(ctx, pub, topic, msgs); err != nil {
				return err
			}
			i = due
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// publishRetrying publishes msgs again (the same messages: a duplicate is
// the consumers' business) until the broker takes them all.
func publishRetrying(ctx context.Context, pub message.Publisher, topic string, msgs []*message.Message) error {
	deadline := time.Now().Add(publishRetryFor)
	for {
		err := pub.Publish(topic, msgs...)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("publish to %s: %w", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Faults.
const (
	faultKill          = "kill"
	faultRedisRestart  = "redis-restart"
	faultBrokerRestart = "broker-restart"
	faultPause         = "pause"
	faultFailover      = "failover"
)

// planned is a fault to inject once progress (operations settled) reaches at.
type planned struct {
	at   int
	what string
}

// makePlan spreads the faults at random between 5% and 90% of the
// operations, in order of progress.
func makePlan(rnd *rand.Rand, cfg config) []planned {
	var plan []planned
	add := func(what string, n int) {
		for range n {
			at := int(float64(cfg.ops) * (0.05 + 0.85*rnd.Float64()))
			plan = append(plan, planned{at: at, what: what})
		}
	}
	add(faultKill, cfg.kills)
	add(faultRedisRestart, cfg.redisRestarts)
	add(faultBrokerRestart, cfg.brokerRestarts)
	add(faultPause, cfg.pauses)
	if cfg.failover {
		add(faultFailover, 1)
	}
	slices.SortStableFunc(plan, func(a, b planned) int { return a.at - b.at })
	return plan
}

// faults injects the planned faults.
type faults struct {
	cfg    config
	log    *logger
	rnd    *rand.Rand
	cs     *children
	getter recordGetter
	ns     string
	redis  *redisServer
	nats   *natsServer
	ha     *redisHA
	// reach bounds the wait of a pause for a consumer to reach its pause
	// point; the run stops it (stopReach) once every operation is
	// settled, since no delivery reaches a pause point after that.
	reach     context.Context
	stopReach context.CancelFunc
	wg        sync.WaitGroup // pauses under way
	mu        sync.Mutex     // res's counters, rnd and pausing, shared with the pauses
	pausing   int
	res       *result
}

func (f *faults) do(ctx context.Context, what string, progress int) error {
	switch what {
	case faultKill:
		c := f.cs.pick(f.intn(1 << 20))
		if c == nil {
			return errors.New("no consumer to kill")
		}
		time.Sleep(time.Duration(f.intn(30)) * time.Millisecond) // a random point, not a poll's
		if err := f.cs.kill(c); err != nil {
			f.log.say("kill: %v", err)
		} else {
			f.log.say("kill %d: SIGKILL consumer %d at %d settled", f.count(&f.res.kills), c.pid, progress)
		}
		_, err := f.cs.start()
		return err
	case faultRedisRestart:
		start := time.Now()
		if err := f.redis.restart(); err != nil {
			return err
		}
		f.log.say("redis restart %d: SIGKILL and start again at %d settled, answering after %v", f.count(&f.res.redisRestarts), progress,
			time.Since(start).Round(time.Millisecond))
		return nil
	case faultBrokerRestart:
		start := time.Now()
		if err := f.nats.restart(); err != nil {
			return err
		}
		f.log.say("broker restart %d: NATS shut down and started again at %d settled, ready after %v", f.count(&f.res.brokerRestarts), progress,
			time.Since(start).Round(time.Millisecond))
		return nil
	case faultFailover:
		dropAt := f.cs.rep.since()
		took, behind, err := f.ha.failover(ctx)
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.res.failovers++
		f.res.promoteMs = int(took.Milliseconds())
		f.mu.Unlock()
		f.log.say("failover: replication stream dropped %v after the start; primary killed (SIGKILL) at %d settled after its replica got nothing for %v "+
			"(acknowledged replication offset behind by %s); Sentinel promoted the replica after %v; old primary started again as a replica",
			dropAt.Round(10*time.Millisecond), progress, replicationLag, behind, took.Round(time.Millisecond))
		return nil
	case faultPause:
		// In the background: the other faults go on meanwhile.
		f.mu.Lock()
		f.pausing++
		f.mu.Unlock()
		f.wg.Go(func() {
			defer func() {
				f.mu.Lock()
				f.pausing--
				f.mu.Unlock()
			}()
			f.pause(ctx, progress)
		})
		return nil
	}
	return fmt.Errorf("unknown fault %q", what)
}

// pause arms a consumer, stops it (SIGSTOP) at its pause point until
// another consumer has completed the operation, resumes it (SIGCONT) and
// waits for it to report its stale attempt fenced.
func (f *faults) pause(ctx context.Context, progress int) {
	// A consumer may get no delivery for a while (its outage breaker is
	// open after a Redis restart, or the others took the work): disarm it
	// and try another, a few times, until every operation is settled
	// (f.reach): no delivery reaches a pause point after that.
	var (
		c       *child
		at      [2]string
		reached bool
	)
	for try, first := 0, f.intn(1<<20); try < pauseTries && !reached; try++ {
		if f.reach.Err() != nil {
			break
		}
		if c = f.pickReady(first + try); c == nil {
			if f.reach.Err() != nil {
				break
			}
			f.log.say("pause: no consumer to pause")
			return
		}
		if err := c.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			f.log.say("pause: arm consumer %d: %v", c.pid, err)
			f.cs.unpause(c)
			return
		}
		var err error
		if at, err = waitLine(f.reach, c, c.pause, pauseReach); err != nil {
			// Disarm it, and release it should it have just got there.
			_ = c.cmd.Process.Signal(syscall.SIGUSR2)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			if f.reach.Err() == nil {
				f.log.say("pause: consumer %d did not reach its pause point: %v", c.pid, err)
			}
			f.cs.unpause(c)
			continue
		}
		reached = true
	}
	if !reached {
		if f.reach.Err() != nil && ctx.Err() == nil {
			f.log.say("pause: every operation settled before a consumer reached its pause point; no pause")
		}
		return
	}
	defer f.cs.unpause(c)
	key, token := at[0], at[1]
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		f.log.say("pause: SIGSTOP consumer %d: %v", c.pid, err)
		return
	}
	n := f.count(&f.res.pauses)
	stopped := time.Now()
	takenOver := false
	deadline := time.Now().Add(pauseTakeover)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rec, err := f.getter.Get(ctx, f.ns, key)
		if err == nil && rec.State == idempotency.StateDone && rec.Token != token {
			takenOver = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		f.log.say("pause %d: SIGCONT consumer %d: %v", n, c.pid, err)
		return
	}
	held := time.Since(stopped).Round(100 * time.Millisecond)
	if !takenOver {
		f.log.say("pause %d: consumer %d stopped at %s for %v; no other consumer completed it meanwhile", n, c.pid, key, held)
		return
	}
	f.count(&f.res.pausesTakenOver)
	for {
		got, err := waitLine(ctx, c, c.fenced, fenceReport)
		if err != nil {
			f.log.say("pause %d: consumer %d stopped at %s for %v, taken over, but its stale attempt was not reported fenced: %v",
				n, c.pid, key, held, err)
			return
		}
		if got == key {
			break
		}
	}
	f.count(&f.res.fenced)
	f.log.say("pause %d: consumer %d stopped (SIGSTOP) at %s at %d settled for %v, past its lease; another consumer completed it; resumed (SIGCONT), its stale attempt was fenced",
		n, c.pid, key, progress, held)
}

// pickReady picks a consumer to pause (children.pickToPause), waiting for
// one to be ready for at most pauseReach, or until every operation is
// settled.
func (f *faults) pickReady(i int) *child {
	deadline := time.Now().Add(pauseReach)
	for {
		if c := f.cs.pickToPause(i); c != nil {
			return c
		}
		if f.reach.Err() != nil || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(tick)
	}
}

// idle reports whether no pause is under way.
func (f *faults) idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pausing == 0
}

// count adds one to a counter of res, under f's lock, and returns it.
func (f *faults) count(p *int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	*p++
	return *p
}

func (f *faults) intn(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.IntN(n)
}

// deadLetters are the dead letters the parent received, by operation key.
type deadLetters struct {
	mu     sync.Mutex
	byKey  map[string]string // key -> reason
	copies int
}

func newDeadLetters() *deadLetters { return &deadLetters{byKey: map[string]string{}} }

func (d *deadLetters) add(key, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byKey[key] = reason
	d.copies++
}

func (d *deadLetters) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.byKey)
}

func (d *deadLetters) get(key string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.byKey[key]
	return r, ok
}

// allSettled reports whether every operation is effected or dead-lettered.
func allSettled(ctx context.Context, db *effectsDB, dead *deadLetters, ops []op) (bool, error) {
	counts, err := db.effectCounts(ctx)
	if err != nil {
		return false, err
	}
	for _, o := range ops {
		if _, ok := dead.get(o.key); !ok && counts[o.key] == 0 {
			return false, nil
		}
	}
	return true, nil
}

// tally counts lost operations, double effects, dead letters and, in lease
// mode, the effect-complete windows, into res.
func tally(ctx context.Context, res *result, db *effectsDB, getter recordGetter, ns string, cs *children, dead *deadLetters, ops []op, log *logger) error {
	counts, err := db.effectCounts(ctx)
	if err != nil {
		return err
	}
	for _, o := range ops {
		reason, isDead := dead.get(o.key)
		effected := counts[o.key] > 0
		if !isDead && !effected {
			res.lost++
		}
		if isDead {
			res.deadLettered++
			if o.kind != kindPoison || reason != string(dlq.ReasonPermanent) {
				res.unexpectedDead++
			}
		}
		if counts[o.key] > 1 {
			res.double++
		}
	}
	if res.mode != modeLease {
		return nil
	}
	markers, err := db.allMarkers(ctx)
	if err != nil {
		return err
	}
	perKey := map[string]int{}
	open := map[string]int{}
	records := map[string]idempotency.Record{}
	windowKills := map[int]bool{}
	seen := map[string]int{} // key+" "+token -> markers so far
	acked := cs.rep.ackedTokens()
	for _, m := range markers {
		perKey[m.key]++
		rec, ok := records[m.key]
		if !ok {
			// A record the store lost (a failover) reads as none.
			if rec, err = getter.Get(ctx, ns, m.key); err != nil && !isNotFound(err) {
				return fmt.Errorf("read the record of %s: %w", m.key, err)
			}
			records[m.key] = rec
		}
		kt := m.key + " " + m.token
		seen[kt]++
		if rec.State == idempotency.StateDone && rec.Token == m.token {
			if seen[kt] == 1 {
				continue // this attempt's Complete happened
			}
			// The same attempt's effect twice: an in-process retry after
			// a COMMIT that failed on the wire but was applied.
			if seen[kt]-1 <= cs.rep.unsureOf(m.key, m.token) {
				open[m.key]++
				res.windows++
				res.commitUnsure++
			}
			continue
		}
		open[m.key]++
		res.windows++
		if slices.Contains(acked[m.key], m.token) {
			// Its Complete was acknowledged, and the store lost it.
			res.lostCompletionWindows++
			continue
		}
		if seen[kt] > 1 && seen[kt]-1 <= cs.rep.unsureOf(m.key, m.token) {
			res.commitUnsure++
			continue
		}
		// A process that was stopped past its lease had its Completes
		// refused; one that was only killed died in the window.
		if cs.wasKilled(m.pid) && !cs.wasPaused(m.pid) {
			res.killsInWindow++
			windowKills[m.pid] = true
		} else {
			res.completeFailed++
		}
	}
	res.windowKills = len(windowKills)
	log.say("lease windows: %d effects without their Complete: %d left by %d of the %d kills, %d by a Complete that was fenced or failed, "+
		"%d by a COMMIT of the effect that failed on the wire after it was applied, %d by an acknowledged Complete the store lost",
		res.windows, res.killsInWindow, res.windowKills, res.kills, res.completeFailed, res.commitUnsure, res.lostCompletionWindows)
	var bad []string
	for k, n := range counts {
		if perKey[k] != n {
			res.markerMismatch++
		}
		if n-1 > open[k] {
			res.windowViolations++
			bad = append(bad, fmt.Sprintf("%s (%d effects, %d windows)", k, n, open[k]))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		log.say("double effects without a window: %s", strings.Join(bad[:min(len(bad), 10)], ", "))
	}
	return nil
}
