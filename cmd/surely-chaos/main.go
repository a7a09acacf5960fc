// Command surely-chaos proves surely's guarantees under faults, on real
// servers: a real broker, a real dedup store, and consumers that are child
// processes killed with SIGKILL.
//
//	go run ./cmd/surely-chaos -mode inbox -broker rabbitmq -ops 10000
//	go run ./cmd/surely-chaos -mode lease -broker nats -ops 10000
//	go run ./cmd/surely-chaos -mode inbox -broker rabbitmq -ops 10000 -net
//	go run ./cmd/surely-chaos -mode lease -broker nats -ops 10000 -net -failover
//	go run ./cmd/surely-chaos -mode lease -broker nats -duration 30m -plot soak.svg
//
// It publishes -ops operations, each with a unique operation key: most are
// plain, a fixed fraction (-poison) fail with a permanent error and must
// end in the dead letter, another fraction (-transient) fail transiently
// on their first attempt. Consumers, -consumers child processes (this
// program re-executed, its role given by the SURELY_CHAOS_CHILD
// environment variable), consume them through handler.New and record each
// effect in a table of the run's own (one row per operation key, with a
// count of effects).
//
// # Modes
//
//   - -mode inbox: the dedup store is idempotency/sqlstore on PostgreSQL
//     (or SQLite with -effects sqlite) and the effect is written inside
//     the transactional inbox (sqlstore.Inbox): effect and DONE mark commit
//     together, so no crash may ever double an effect.
//   - -mode lease: the dedup store is idempotency/redisstore on a
//     redis-server this program starts itself (on a free loopback port,
//     AOF with appendfsync always, in a temporary directory), and the
//     effect is a plain insert from the handler, outside the store. A
//     consumer that dies after its effect and before Complete leaves the
//     effect to run again: lease mode's documented window. In the same
//     transaction as its effect, the consumer writes a marker (operation
//     key, fencing token, process id); at the end the parent compares each
//     marker with the store's record: a marker whose token never became
//     DONE is an effect whose Complete did not happen (the process was
//     killed in the window, or Complete failed: fenced after a pause, or
//     the store was down). Each extra effect of a key must be covered by
//     such a window of that key.
//
// # Faults
//
// Spread over the run, by progress (operations settled):
//
//   - -kills SIGKILLs of a random consumer (default 20 per 10,000 ops, at
//     least 3), each replaced by a new child at once;
//   - -redis-restarts (lease mode): the private redis-server is killed with
//     SIGKILL and started again on the same port and directory; its AOF
//     keeps every DONE record;
//   - -broker-restarts (nats): the NATS server is embedded in this process
//     (nats-server as a library, JetStream in a temporary directory) and is
//     shut down and started again on the same port and store. The shared
//     RabbitMQ and Redis (Streams) servers are never restarted: other
//     programs use them; broker_restarts is then 0;
//   - -pauses: a consumer is armed (SIGUSR1); the next operation to reach
//     its pause point (lease mode: after the effect, before Complete; inbox
//     mode: after the claim, before the inbox transaction) prints a marker,
//     the parent stops it with SIGSTOP until another consumer has completed
//     the operation, then resumes it with SIGCONT: its stale Complete (or
//     inbox transaction) must be fenced.
//
// # Network faults (-net)
//
// Every consumer reaches the store, the broker and the effects database
// through proxies of its own (toxiproxy's Go library, in this process, on
// loopback ports; new ones for each consumer started). From two lanes, at
// random times until every operation is settled, each fault bounded in
// time (1-4 s unless said otherwise), the run injects, dealing the kinds
// from a shuffled deck so that every kind comes up:
//
//   - latency: 50-500 ms with jitter on one link of one consumer;
//   - timeout: one consumer's store link silent (data dropped) past the
//     store timeout (1.5 s), then its connections closed;
//   - reset: one link's connections reset (TCP RST) as they send;
//   - bandwidth: one link throttled to 1-16 KB/s;
//   - partition_store: one consumer cut off from the store while it still
//     reaches the broker (in inbox mode the store is the effects database);
//   - partition_broker: the reverse;
//   - slow_store: every consumer's store calls delayed 1 s ± 200 ms, past
//     the lease-extension interval (lease/3) and below the lease, for two
//     leases: leases are extended late or given up, never held by two.
//
// In lease mode a consumer whose effect transaction's COMMIT fails prints
// it: the server may have committed before the link failed, and the retry
// then effects again under the same token; the run counts such effects as
// windows (commit_unsure).
//
// # Store failover (-failover, lease mode)
//
// The store runs on a Redis primary with one replica and three Sentinels,
// all started by the run on loopback ports; consumers use go-redis's
// Sentinel client (through their proxies with -net). Once, at a random
// point, the stream from the primary to its replica is dropped for a
// second, then the primary is SIGKILLed: Sentinel promotes the replica,
// which never got that second's writes, and the old primary comes back as
// a replica. With -wait-replicas (the default), Complete waits for the
// replica (redisstore.WithWaitReplicas(1, 2s)).
//
// Every consumer prints the key and token of each Complete that returned
// nil (an acknowledged completion); after the run each one's record is
// read: acked_lost counts those not DONE with their token, lost_rerun those
// whose operation ran again, lost_forgotten those whose record is just
// gone. Without -wait-replicas such losses are counted, not failed; the
// effects they double are windows (lost_completion_windows). In every other
// run an acknowledged completion lost fails the run.
//
// # Soak (-duration)
//
// -duration D publishes -rate operations a second (default 50) for D, with
// -net on and no kills, pauses or restarts unless asked for, so that every
// consumer lives through the whole soak. Each consumer prints its
// goroutines, resident memory and heap every -stats-every (5 s); the run
// compares, per consumer, the means of the window after warm-up (the first
// fifth) with those of the last window (a tenth): resident memory must not
// grow by more than 10 %, goroutines not by more than 10 % and 4. -plot
// writes an SVG of both over time. Every run reports the processing
// latency (publish to acknowledged completion) percentiles.
//
// # Result
//
// Once every operation is effected or dead-lettered (or -timeout passes),
// the consumers are stopped and the tables counted. Progress goes to
// stderr; stdout gets exactly one line:
//
//	chaos: mode=M broker=B ops=N kills=K redis_restarts=R lost=L double_effects=D dead_lettered=P dlq_expected=P broker_restarts=X pauses=S fenced=F windows=W window_kills=WK kills_in_window=KW complete_failed=CF window_violations=V
//
// followed by the fields of -net (net_<kind>=N for each kind, net_faults,
// commit_unsure, lease_lost: attempts the store fenced), of -failover
// (failovers, promote_ms, wait_replicas, lost_completion_windows), the
// check of acknowledged completions (acked_checked, acked_lost, lost_rerun,
// lost_forgotten), latency_ms_p50/p90/p99/max, and for a soak
// consumers_sampled, rss_growth_max_pct and goroutine_growth_max_pct.
//
// lost counts operations neither effected nor dead-lettered; double_effects
// the operation keys effected more than once; dead_lettered the keys that
// reached the dead letter and dlq_expected the poison ones; fenced the
// paused consumers whose stale attempt the store refused.
//
// windows (lease mode) counts the effects whose Complete never happened:
// kills_in_window those left by a consumer killed between its effect and
// Complete (window_kills of the kills landed there; one kill leaves up to
// one window per message in flight), complete_failed those whose Complete
// was refused or failed (a consumer stopped past its lease, the store
// restarting). window_violations counts the keys with more extra effects
// than windows of their own.
//
// The exit status is 1 when lost > 0, when an acknowledged completion was
// lost (except in a failover without -wait-replicas), when a soak's
// consumer grew, when the dead letters are not exactly the poison
// operations, when inbox mode doubled an effect, when lease mode doubled
// one beyond its windows, when a consumer stopped past its lease was taken
// over but not fenced, or when the run did not settle in time; 2 on bad
// flags.
//
// # Servers
//
//	SURELY_POSTGRES_URL  default postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	SURELY_AMQP_URL      default amqp://guest:guest@127.0.0.1:5672/
//	SURELY_REDIS_URL     default redis://127.0.0.1:6379 (Redis Streams broker only)
//
// Every run names its queues, streams, tables and keys with a random suffix
// and removes them at its end; it never flushes, stops or restarts a shared
// server. Everything is on loopback, and every wait is bounded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Environment variables, with the defaults used when they are unset.
const (
	postgresEnv     = "SURELY_POSTGRES_URL"
	amqpEnv         = "SURELY_AMQP_URL"
	redisEnv        = "SURELY_REDIS_URL"
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultAMQP     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultRedis    = "redis://127.0.0.1:6379"
)

func main() {
	if raw, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(raw))
	}
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "surely-chaos:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.stdout, cfg.stderr = os.Stdout, os.Stderr
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "surely-chaos:", strings.Join(strings.Fields(err.Error()), " "))
		stop()
		os.Exit(1)
	}
	if problems := res.problems(); len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "surely-chaos: FAILED:", strings.Join(problems, "; "))
		stop()
		os.Exit(1)
	}
}

// config is one run of the parent.
type config struct {
	mode, broker, effects  string
	ops                    int
	timeout                time.Duration
	kills                  int
	redisRestarts          int
	brokerRestarts         int
	pauses                 int
	consumers, concurrency int
	poison, transient      float64
	postgresURL, amqpURL   string
	redisURL               string
	childArgs              []string // extra arguments of the re-executed child (the test binary's -test.run)
	stdout, stderr         io.Writer
	seed                   uint64
	settleGrace            time.Duration
	logChildren            bool
	net                    bool          // network faults through per-consumer proxies
	failover               bool          // lease mode: primary, replica, Sentinels; the primary killed once
	waitReplicas           bool          // with failover: Complete waits for the replica (WithWaitReplicas)
	duration               time.Duration // soak: publish at rate for this long
	rate                   int           // soak: operations per second
	statsEvery             time.Duration // consumers sample their memory and goroutines this often (0: never)
	plot                   string        // soak: SVG file of memory and goroutines over time
	// skipFlat: a soak reports its consumers' growth without failing on
	// it (tests under the race detector, whose shadow memory grows with
	// the run and is not the program's).
	skipFlat bool
}

// Defaults of the flags.
const (
	defaultOps       = 10000
	killsPer10k      = 20
	minDefaultKills  = 3
	defaultConsumers = 3
	defaultConc      = 4
	defaultPoison    = 0.01
	defaultTransient = 0.05
	defaultRate      = 50
)

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	cfg := config{}
	fs.StringVar(&cfg.mode, "mode", "inbox", "effect mode: inbox (PostgreSQL transactional inbox) or lease (Redis store, external effect)")
	fs.StringVar(&cfg.broker, "broker", "nats", "broker: rabbitmq, nats (embedded, restartable) or redis (Redis Streams)")
	fs.StringVar(&cfg.effects, "effects", "postgres", "where effects are recorded: postgres or sqlite")
	fs.IntVar(&cfg.ops, "ops", defaultOps, "operations to publish")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "bound of the whole run")
	fs.IntVar(&cfg.kills, "kills", -1, fmt.Sprintf("SIGKILLs of consumers (default %d per 10,000 ops, at least %d)", killsPer10k, minDefaultKills))
	fs.IntVar(&cfg.redisRestarts, "redis-restarts", -1, "restarts of the private redis-server in lease mode (default 3; 0 in inbox mode)")
	fs.IntVar(&cfg.brokerRestarts, "broker-restarts", -1, "restarts of the embedded NATS server (default 2; rabbitmq and redis are shared servers, never restarted)")
	fs.IntVar(&cfg.pauses, "pauses", 2, "consumers paused past their lease with SIGSTOP/SIGCONT")
	fs.IntVar(&cfg.consumers, "consumers", defaultConsumers, "consumer processes running at once (at least 2, so that a paused one has a successor)")
	fs.IntVar(&cfg.concurrency, "concurrency", defaultConc, "messages in flight per consumer process")
	fs.Float64Var(&cfg.poison, "poison", defaultPoison, "fraction of poison operations (permanent error, dead letter)")
	fs.Float64Var(&cfg.transient, "transient", defaultTransient, "fraction of operations failing transiently on their first attempt")
	fs.Uint64Var(&cfg.seed, "seed", 0, "random seed (0: a random one, printed)")
	fs.BoolVar(&cfg.logChildren, "v", false, "log the consumers' own output lines")
	fs.BoolVar(&cfg.net, "net", false, "network faults: latency, timeouts, resets, bandwidth limits, partitions and a slow store, through proxies of every consumer")
	fs.BoolVar(&cfg.failover, "failover", false, "lease mode: run the store on a primary, a replica and three Sentinels, and kill the primary once")
	fs.BoolVar(&cfg.waitReplicas, "wait-replicas", true, "with -failover: Complete waits for the replica (redisstore.WithWaitReplicas(1, 2s))")
	fs.DurationVar(&cfg.duration, "duration", 0, "soak: publish at -rate for this long, with -net on (sets -ops; kills, pauses and restarts default to 0)")
	fs.IntVar(&cfg.rate, "rate", defaultRate, "soak: operations published per second")
	fs.StringVar(&cfg.plot, "plot", "", "soak: write an SVG plot of every consumer's memory and goroutines over time to this file")
	fs.DurationVar(&cfg.statsEvery, "stats-every", 0, "how often consumers report memory and goroutines (default 5s in a soak, else never)")
	explicit := map[string]bool{}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if cfg.duration > 0 {
		// A soak: steady rate, every network fault; crashes only when asked
		// for, so that each consumer lives through the whole soak.
		if cfg.duration > 24*time.Hour || cfg.rate < 1 || cfg.rate > 10_000 {
			return cfg, fmt.Errorf("-duration %v -rate %d: want at most 24h and 1 to 10000 ops/s", cfg.duration, cfg.rate)
		}
		cfg.ops = int(cfg.duration.Seconds() * float64(cfg.rate))
		cfg.net = true
		for name, p := range map[string]*int{"kills": &cfg.kills, "redis-restarts": &cfg.redisRestarts,
			"broker-restarts": &cfg.brokerRestarts, "pauses": &cfg.pauses} {
			if !explicit[name] {
				*p = 0
			}
		}
		if !explicit["timeout"] {
			cfg.timeout = cfg.duration + 10*time.Minute
		}
		if cfg.statsEvery == 0 {
			cfg.statsEvery = 5 * time.Second
		}
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.postgresURL = envOr(postgresEnv, defaultPostgres)
	cfg.amqpURL = envOr(amqpEnv, defaultAMQP)
	cfg.redisURL = envOr(redisEnv, defaultRedis)
	return cfg.withDefaults()
}

func (c config) withDefaults() (config, error) {
	switch c.mode {
	case modeInbox, modeLease:
	default:
		return c, fmt.Errorf("-mode %q: want inbox or lease", c.mode)
	}
	switch c.broker {
	case brokerRabbitMQ, brokerNATS, brokerRedis:
	default:
		return c, fmt.Errorf("-broker %q: want rabbitmq, nats or redis", c.broker)
	}
	switch c.effects {
	case effectsPostgres, effectsSQLite:
	default:
		return c, fmt.Errorf("-effects %q: want postgres or sqlite", c.effects)
	}
	if c.ops < 1 || c.ops > 1_000_000 {
		return c, fmt.Errorf("-ops %d: want 1 to 1000000", c.ops)
	}
	if c.timeout <= 0 {
		return c, fmt.Errorf("-timeout %v: want a positive duration", c.timeout)
	}
	if c.kills < 0 {
		c.kills = max(minDefaultKills, (c.ops*killsPer10k+9999)/10000)
	}
	if c.failover && c.mode != modeLease {
		return c, errors.New("-failover: only lease mode has a Redis store")
	}
	if c.failover && c.redisRestarts > 0 {
		return c, errors.New("-failover replaces -redis-restarts: the primary is killed and a replica promoted")
	}
	if c.redisRestarts < 0 {
		c.redisRestarts = 0
		if c.mode == modeLease && !c.failover {
			c.redisRestarts = 3
		}
	}
	if c.redisRestarts > 0 && c.mode != modeLease {
		return c, fmt.Errorf("-redis-restarts %d: only lease mode has a Redis store", c.redisRestarts)
	}
	if c.brokerRestarts < 0 {
		c.brokerRestarts = 0
		if c.broker == brokerNATS {
			c.brokerRestarts = 2
		}
	}
	if c.brokerRestarts > 0 && c.broker != brokerNATS {
		return c, fmt.Errorf("-broker-restarts %d: only the embedded NATS server is restarted; %s is a shared server", c.brokerRestarts, c.broker)
	}
	if c.pauses < 0 || c.kills > 10_000 || c.redisRestarts > 100 || c.brokerRestarts > 100 || c.pauses > 100 {
		return c, fmt.Errorf("fault counts out of range (kills %d, redis restarts %d, broker restarts %d, pauses %d)",
			c.kills, c.redisRestarts, c.brokerRestarts, c.pauses)
	}
	if c.consumers < 2 || c.consumers > 16 {
		return c, fmt.Errorf("-consumers %d: want 2 to 16", c.consumers)
	}
	if c.concurrency < 1 || c.concurrency > 64 {
		return c, fmt.Errorf("-concurrency %d: want 1 to 64", c.concurrency)
	}
	if c.poison < 0 || c.transient < 0 || c.poison+c.transient > 0.5 {
		return c, fmt.Errorf("-poison %v -transient %v: want non-negative fractions adding up to at most 0.5", c.poison, c.transient)
	}
	if c.settleGrace == 0 {
		c.settleGrace = 2 * time.Second
	}
	return c, nil
}

// Modes, brokers and effect databases.
const (
	modeInbox       = "inbox"
	modeLease       = "lease"
	brokerRabbitMQ  = "rabbitmq"
	brokerNATS      = "nats"
	brokerRedis     = "redis"
	effectsPostgres = "postgres"
	effectsSQLite   = "sqlite"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
