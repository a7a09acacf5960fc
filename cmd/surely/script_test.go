package main

// The operator workflow as scripts: testdata/script/*.txtar, run by
// TestScripts with github.com/rogpeppe/go-internal/testscript.
//
// # Backends
//
// Every script runs once per backend, as a subtest of TestScripts:
//
//	sqlite    always: one database file $WORK/app.db holds the store and the archive
//	redis     when SURELY_REDIS_URL is set (fails without it under SURELY_REQUIRE_SERVICES=1)
//	postgres  when SURELY_POSTGRES_URL is set (idem)
//	mysql     when SURELY_MYSQL_URL is set (MySQL or MariaDB)
//
// Each run has its own Redis key prefixes or SQL table names (random) and
// removes them when it ends. A script finds its backend in these variables:
//
//	SURELY_STORE_URL    the idempotency store (also $STORE)
//	SURELY_ARCHIVE_URL  the dead-letter archive (also $ARCHIVE)
//	BACKEND             sqlite, redis, postgres or mysql
//	OUTBOX              an outbox URL (postgres only)
//
// and in the conditions [sqlite], [redis], [postgres], [mysql] and [sql]
// (any SQL backend).
//
// # Commands
//
// Besides testscript's own (exec, stdout, cmp, env, ...):
//
//	surely ARGS...
//	    runs the command in-process (the same execute as main) with the
//	    script's environment; it fails unless it exits 0 (or, negated with
//	    !, unless it exits non-zero). Its exit status is kept for exitcode.
//	    Paths are not resolved against $WORK: use $WORK/... explicitly.
//	exitcode N
//	    the last surely exited with status N.
//	deadletter [-namespace NS] [-topic T] [-key-prefix P] [-permanent] N
//	    dead-letters N messages through a real handler.New consumer whose
//	    dedup store is $SURELY_STORE_URL and whose dead-letter target is the
//	    archive $SURELY_ARCHIVE_URL (the schema must exist: run surely
//	    migrate up first). The handler always fails: each message spends its
//	    budget of 3 attempts (or, with -permanent, fails once permanently),
//	    so its record ends EXHAUSTED and one dead letter is archived. Keys
//	    are P1..PN (default order-1..order-N), topic orders, namespace
//	    charge-payments. It sets DLQ_ID_1..DLQ_ID_N to the dead letters' IDs.
//	record NAMESPACE STATE KEY...
//	    puts a record in STATE (in_progress, failed, exhausted, done) for each
//	    KEY in the store, through Claim, Release and Complete.
//	consume [-namespace NS] [-topic T] [-fail] N
//	    runs a real handler.New consumer (store $SURELY_STORE_URL, dead
//	    letters to $SURELY_ARCHIVE_URL) on topic T (default orders) of the
//	    script's in-process broker until it has handled N deliveries; its
//	    handler succeeds (or, with -fail, fails every attempt). The broker
//	    is the URL mem:bus for surely (surely dlq replay --to mem:bus)
//	    and keeps every message published on it: each consume is handed all
//	    of them again, and the dedup store answers for the ones already done.
//
// To add a command, add it to scriptCmds; to add a backend, to
// scriptBackends.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// scriptBackend is a backend the scripts run on.
type scriptBackend struct {
	name string
	// setup returns the store and archive URLs of one script run and
	// registers their removal with env.Defer; it may set more variables.
	setup func(env *testscript.Env) (store, archive string, err error)
}

func TestScripts(t *testing.T) {
	t.Parallel()
	for _, b := range scriptBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testscript.Run(t, testscript.Params{
				Dir: filepath.Join("testdata", "script"),
				Setup: func(env *testscript.Env) error {
					bus := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
					env.Values[busKey{}] = bus
					env.Defer(func() { _ = bus.Close() })
					store, archive, err := b.setup(env)
					if err != nil {
						return err
					}
					env.Setenv("BACKEND", b.name)
					env.Setenv("STORE", store)
					env.Setenv("ARCHIVE", archive)
					env.Setenv("SURELY_STORE_URL", store)
					env.Setenv("SURELY_ARCHIVE_URL", archive)
					return nil
				},
				Cmds: scriptCmds,
				Condition: func(cond string) (bool, error) {
					switch cond {
					case "sqlite", "redis", "postgres", "mysql":
						return cond == b.name, nil
					case "sql":
						return b.name != "redis", nil
					}
					return false, fmt.Errorf("unknown condition %q", cond)
				},
			})
		})
	}
}

// randomName returns a lower-case name for tables and key prefixes.
func randomName() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "surely_script_" + hex.EncodeToString(b[:])
}

// scriptBackends returns the backends the environment offers: SQLite
// always, the servers whose URLs are set (all of them, or a failure,
// under SURELY_REQUIRE_SERVICES=1).
func scriptBackends(t *testing.T) []scriptBackend {
	backends := []scriptBackend{{name: "sqlite", setup: func(env *testscript.Env) (string, string, error) {
		path := "sqlite:" + filepath.Join(env.WorkDir, "app.db")
		return path, path, nil
	}}}
	service := func(name, variable string) string {
		v := os.Getenv(variable)
		if v == "" && testenv.Required() {
			t.Fatalf("SURELY_REQUIRE_SERVICES=1 but %s is not set (the %s scripts)", variable, name)
		}
		return v
	}
	if u := service("redis", "SURELY_REDIS_URL"); u != "" {
		backends = append(backends, scriptBackend{name: "redis", setup: func(env *testscript.Env) (string, string, error) {
			name := randomName()
			env.Defer(func() { removeRedisKeys(u, name) })
			return withParam(u, "prefix", name+":"), withParam(u, "prefix", name+"-dlq"), nil
		}})
	}
	if u := service("postgres", "SURELY_POSTGRES_URL"); u != "" {
		backends = append(backends, scriptBackend{name: "postgres", setup: func(env *testscript.Env) (string, string, error) {
			name := randomName()
			env.Defer(func() { dropTables("pgx", u, name) })
			env.Setenv("OUTBOX", withParam(u, "table", name+"_outbox"))
			return withParam(u, "table", name+"_inbox"), withParam(u, "prefix", name+"_dlq"), nil
		}})
	}
	if dsn := os.Getenv("SURELY_MYSQL_URL"); dsn != "" {
		backends = append(backends, scriptBackend{name: "mysql", setup: func(env *testscript.Env) (string, string, error) {
			name := randomName()
			env.Defer(func() { dropTables("mysql", dsn, name) })
			u := "mysql://" + dsn
			return withParam(u, "table", name+"_inbox"), withParam(u, "prefix", name+"_dlq"), nil
		}})
	}
	return backends
}

// withParam adds the query parameter name=value to a URL or a MySQL DSN.
func withParam(raw, name, value string) string {
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + name + "=" + url.QueryEscape(value)
}

// removeRedisKeys deletes the keys of a run: the store's (name:...) and
// the archive's ({name-dlq}:...).
func removeRedisKeys(u, name string) {
	opts, err := redis.ParseURL(u)
	if err != nil {
		return
	}
	c := redis.NewClient(opts)
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	for _, match := range []string{name + ":*", "{" + name + "-dlq}*"} {
		iter := c.Scan(ctx, 0, match, 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	}
}

// dropTables drops the tables of a run, all named name_...
func dropTables(driver, dsn, name string) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return
	}
	defer func() { _ = db.Close() }()
	ctx := context.Background()
	q := "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE '" + name + "%'"
	quote := func(t string) string { return `"` + t + `"` }
	if driver == "mysql" {
		q = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE '" + name + "%'"
		quote = func(t string) string { return "`" + t + "`" }
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return
	}
	var tables []string
	for rows.Next() {
		var t string
		if rows.Scan(&t) == nil {
			tables = append(tables, t)
		}
	}
	_ = rows.Close()
	for _, t := range tables {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quote(t))
	}
}

// scriptCmds are the harness's commands (see the file comment).
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"surely":     cmdSurely,
	"exitcode":   cmdExitcode,
	"deadletter": cmdDeadletter,
	"record":     cmdRecord,
	"consume":    cmdConsume,
}

// busKey finds the script's in-process broker in its values.
type busKey struct{}

// scriptBus is the script's in-process broker (a persistent GoChannel).
func scriptBus(ts *testscript.TestScript) *gochannel.GoChannel {
	return ts.Value(busKey{}).(*gochannel.GoChannel)
}

// scriptApp is the app of a script command: the script's environment and
// output, the real clock, and the script's broker as mem:bus.
func scriptApp(ts *testscript.TestScript) *app {
	a := newApp(ts.Stdout(), ts.Stderr(), ts.Getenv)
	a.memBrokers = map[string]message.Publisher{"mem:bus": scriptBus(ts)}
	return a
}

func cmdSurely(ts *testscript.TestScript, neg bool, args []string) {
	code := execute(context.Background(), scriptApp(ts), args)
	ts.Setenv("SURELY_EXIT", strconv.Itoa(code))
	switch {
	case code != 0 && !neg:
		ts.Fatalf("surely %s: exit status %d", strings.Join(args, " "), code)
	case code == 0 && neg:
		ts.Fatalf("surely %s: unexpected success", strings.Join(args, " "))
	}
}

func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: exitcode N")
	}
	if got := ts.Getenv("SURELY_EXIT"); got != args[0] {
		ts.Fatalf("surely exited with status %s, want %s", got, args[0])
	}
}

// scriptStore opens the store of $SURELY_STORE_URL as the command would.
func scriptStore(ts *testscript.TestScript) *storeConn {
	a := scriptApp(ts)
	ep, err := endpoint.Store(ts.Getenv("SURELY_STORE_URL"))
	ts.Check(err)
	st, err := a.dialStore(context.Background(), ep)
	ts.Check(err)
	return st
}

// scriptArchive opens the archive of $SURELY_ARCHIVE_URL as a consumer
// would: unlike the command, it needs no entry to exist yet.
func scriptArchive(ts *testscript.TestScript) (message.Publisher, func()) {
	ep, err := endpoint.Archive(ts.Getenv("SURELY_ARCHIVE_URL"))
	ts.Check(err)
	ctx := context.Background()
	switch ep.Kind {
	case endpoint.Redis:
		client, err := redisClient(ctx, ep)
		ts.Check(err)
		ar, err := redisarchive.New(client, archive.WithPrefix(ep.Prefix))
		ts.Check(err)
		return ar, func() { _ = client.Close() }
	case endpoint.Postgres, endpoint.MySQL, endpoint.SQLite:
		db, err := openDB(ctx, ep)
		ts.Check(err)
		dialect := map[endpoint.Kind]sqlstore.Dialect{endpoint.Postgres: sqlstore.Postgres, endpoint.MySQL: sqlstore.MySQL, endpoint.SQLite: sqlstore.SQLite}[ep.Kind]
		var opts []dlq.Option
		if ep.Prefix != "" {
			opts = append(opts, archive.WithPrefix(ep.Prefix))
		}
		ar, err := sqlarchive.New(db, dialect, opts...)
		ts.Check(err)
		return ar, func() { _ = db.Close() }
	}
	ts.Fatalf("deadletter: no archive for %s", ep)
	return nil, nil
}

// scriptHandler is the consumer of the scripts: handler.New on the
// script's store and archive, in namespace ns, with a budget of 3 attempts
// all made in one delivery, no backoff and no breaker; business is called
// with the operation key. done closes the store and the archive.
func scriptHandler(ts *testscript.TestScript, ns string, business func(key string) error) (h message.HandlerFunc, done func()) {
	st := scriptStore(ts)
	ar, closeArchive := scriptArchive(ts)
	h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
		return nil, business(idempotency.KeyFrom(msg.Context()))
	}, handler.WithStore(st.Store, ns), handler.WithDeadLetter(ar, "dead"),
		handler.WithMaxAttempts(3), handler.WithInProcessAttempts(3), handler.WithBackoff(0, 0),
		handler.WithBreaker(nil), handler.WithConsumerGroup("billing"))
	ts.Check(err)
	return h, func() {
		closeArchive()
		st.close()
	}
}

func cmdDeadletter(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("deadletter", flag.ContinueOnError)
	ns := fs.String("namespace", "charge-payments", "namespace of the handler")
	topic := fs.String("topic", "orders", "original topic")
	keyPrefix := fs.String("key-prefix", "order-", "operation keys are this and 1..N")
	permanent := fs.Bool("permanent", false, "fail permanently at once")
	panics := fs.Bool("panic", false, "panic in every attempt")
	ts.Check(fs.Parse(args))
	if neg || fs.NArg() != 1 {
		ts.Fatalf("usage: deadletter [-namespace NS] [-topic T] [-key-prefix P] [-permanent] [-panic] N")
	}
	n, err := strconv.Atoi(fs.Arg(0))
	ts.Check(err)
	fn, done := scriptHandler(ts, *ns, func(key string) error {
		err := fmt.Errorf("charge %s: gateway unavailable", key)
		if *panics {
			panic(err)
		}
		if *permanent {
			return handler.Permanent(err)
		}
		return err
	})
	defer done()
	runConsumer(ts, *ns, *topic, fn, func(publish func(*message.Message)) {
		for i := 1; i <= n; i++ {
			key := *keyPrefix + strconv.Itoa(i)
			msg := message.NewMessage(uuidFor(*ns+"/"+key), []byte(fmt.Sprintf(`{"order":%d}`, i)))
			msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
			publish(msg)
			ts.Setenv("DLQ_ID_"+strconv.Itoa(i), dlqID(msg.UUID))
		}
	})
}

// runConsumer runs h in a Watermill router on a GoChannel topic, as a
// consumer would, while produce publishes to it. Each publish returns once
// the router acked the message (the dead letter, if any, is archived), so
// nothing is waited for by time.
func runConsumer(ts *testscript.TestScript, name, topic string, h message.HandlerFunc, produce func(publish func(*message.Message))) {
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer func() { ts.Check(pubsub.Close()) }()
	runConsumerOn(ts, pubsub, name, topic, h, produce)
}

// runConsumerOn is runConsumer on a given GoChannel, which it leaves open
// (the router closes its subscribers; this one it is given without Close).
func runConsumerOn(ts *testscript.TestScript, pubsub *gochannel.GoChannel, name, topic string, h message.HandlerFunc, produce func(publish func(*message.Message))) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	ts.Check(err)
	router.AddConsumerHandler(name, topic, unclosed{pubsub}, func(msg *message.Message) error {
		_, err := h(msg)
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()
	produce(func(msg *message.Message) { ts.Check(pubsub.Publish(topic, msg)) })
	cancel()
	ts.Check(<-done)
}

// unclosed is a subscriber whose Close leaves it open: its subscriptions
// still end with their context.
type unclosed struct{ message.Subscriber }

func (unclosed) Close() error { return nil }

func cmdConsume(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	ns := fs.String("namespace", "charge-payments", "namespace of the handler")
	topic := fs.String("topic", "orders", "topic to consume")
	fail := fs.Bool("fail", false, "fail every attempt")
	ts.Check(fs.Parse(args))
	if neg || fs.NArg() != 1 {
		ts.Fatalf("usage: consume [-namespace NS] [-topic T] [-fail] N")
	}
	n, err := strconv.Atoi(fs.Arg(0))
	ts.Check(err)
	fn, done := scriptHandler(ts, *ns, func(key string) error {
		if *fail {
			return fmt.Errorf("charge %s: gateway unavailable", key)
		}
		return nil
	})
	defer done()
	handled := make(chan struct{}, n)
	counted := func(msg *message.Message) ([]*message.Message, error) {
		out, err := fn(msg)
		if err == nil {
			select {
			case handled <- struct{}{}:
			default: // more than n deliveries: the rest are not waited for
			}
		}
		return out, err
	}
	runConsumerOn(ts, scriptBus(ts), *ns, *topic, counted, func(func(*message.Message)) {
		deadline := time.After(30 * time.Second)
		for i := 0; i < n; i++ {
			select {
			case <-handled:
			case <-deadline:
				ts.Fatalf("consume: %d of %d deliveries handled in 30s", i, n)
			}
		}
	})
}

// uuidFor returns a UUID derived from s, so that a script's dead-letter IDs
// do not change between runs.
func uuidFor(s string) string {
	return dlqID("script:" + s)
}

func cmdRecord(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: record NAMESPACE in_progress|failed|exhausted|done KEY...")
	}
	ns, state := args[0], idempotency.State(args[1])
	st := scriptStore(ts)
	defer st.close()
	ctx := context.Background()
	for _, key := range args[2:] {
		res, err := st.Claim(ctx, idempotency.ClaimRequest{
			Namespace: ns, Key: key, Fingerprint: "sha256:script", Lease: time.Hour, MaxAttempts: 3,
		})
		ts.Check(err)
		if res.Status != idempotency.Acquired {
			ts.Fatalf("record %s %s: claim answered %v, want acquired (a new key)", ns, key, res.Status)
		}
		switch state {
		case idempotency.StateInProgress:
		case idempotency.StateFailed, idempotency.StateExhausted:
			err = st.Release(ctx, res.Lease, idempotency.Failure{
				Error: "charge " + key + ": card declined", Reason: "error", Final: state == idempotency.StateExhausted,
			})
		case idempotency.StateDone:
			err = st.Complete(ctx, res.Lease, idempotency.Outcome{})
		default:
			err = errors.New("unknown state " + string(state))
		}
		ts.Check(err)
	}
}
