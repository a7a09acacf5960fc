package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/childproc"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/retry"
)

// The environment that turns the test binary into a poison-test consumer.
const (
	poisonChildEnv       = "SURELY_POISON_CHILD"
	poisonChildConfigEnv = "SURELY_POISON_CHILD_CONFIG"
	poisonExitCode       = 3
)

// poisonConfig configures a poison-test consumer.
type poisonConfig struct {
	Prefix   string `json:"prefix"`
	Consumer string `json:"consumer"`
	// SQLite is the path of the dedup store's database file, shared by
	// every consumer process of the test (the durable attempt count).
	SQLite    string `json:"sqlite"`
	PoisonKey string `json:"poison_key"`
}

// poisonChild is a consumer that dies on every attempt of the poison key:
// on odd attempts it calls os.Exit itself, on even ones it prints "AT" and
// waits for the parent's SIGKILL. The broker is a Redis stream (consumer
// group), the store sqlstore on a SQLite file. It prints:
//
//	READY <consumer>
//	RUN <key> <attempt> exit|kill
//	AT <key> <attempt>
//	OUTCOME <outcome> <key> <attempt> <reason>
func poisonChild() int {
	if err := runPoisonChild(); err != nil {
		fmt.Fprintln(os.Stderr, "poison child:", err)
		return 2
	}
	return 0
}

func runPoisonChild() error {
	var cfg poisonConfig
	if err := json.Unmarshal([]byte(os.Getenv(poisonChildConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	n := names{Prefix: cfg.Prefix}
	ctx, cancel := childproc.ChildContext()
	defer cancel()
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(os.Stdout, format+"\n", args...) }

	db, err := sql.Open("sqlite", "file:"+cfg.SQLite+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	opt, err := redis.ParseURL(os.Getenv("SURELY_REDIS_URL"))
	if err != nil {
		return err
	}
	wlogger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: redis.NewClient(opt), Consumer: cfg.Consumer, ConsumerGroup: n.Group(),
		NackResendSleep: 50 * time.Millisecond, BlockTime: 100 * time.Millisecond,
		ClaimInterval: 200 * time.Millisecond, MaxIdleTime: 500 * time.Millisecond,
		DisableIndefiniteInitialBlock: true,
	}, wlogger)
	if err != nil {
		return err
	}
	deadPub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redis.NewClient(opt)}, wlogger)
	if err != nil {
		return err
	}
	business := func(msg *message.Message) ([]*message.Message, error) {
		op, _ := idempotency.OperationFrom(msg.Context())
		if op.Key != cfg.PoisonKey {
			return nil, nil
		}
		if op.Attempt%2 == 1 {
			say("RUN %s %d exit", op.Key, op.Attempt)
			os.Exit(poisonExitCode) // the process dies: no deferred code, no Release
		}
		say("RUN %s %d kill", op.Key, op.Attempt)
		say("AT %s %d", op.Key, op.Attempt)
		time.Sleep(time.Hour) // the parent SIGKILLs us here
		return nil, nil
	}
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	if err != nil {
		return err
	}
	h, err := handler.New(business,
		handler.WithStore(store, namespace),
		handler.WithDeadLetter(deadPub, n.Dead()),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(time.Second),
		handler.WithConsumerGroup(n.Group()),
		handler.WithStoreTimeout(900*time.Millisecond), // shorter than the lease
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			say("OUTCOME %s %s %d %s", p.Outcome, p.Msg.Metadata.Get(idempotency.DefaultMetadataKey), p.Attempt, p.Reason)
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, wlogger)
	if err != nil {
		return err
	}
	router.AddConsumerHandler("orders", n.Stream(), sub, handler.NoPublish(h))
	errc := make(chan error, 1)
	go func() { errc <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-errc:
		return fmt.Errorf("router: %w", err)
	}
	say("READY %s", cfg.Consumer)
	return <-errc
}

// TestPoisonCrashLoopOnSQLite is the crash-loop row of docs/POISON.md: a
// message whose every attempt kills its consumer process (os.Exit on odd
// attempts, SIGKILL on even ones). The attempt count lives in a SQLite
// file, so it survives the deaths: after 3 claims the next consumer finds
// the budget spent, dead-letters the message without running it (reason
// exhausted, payload and metadata intact), and goes on with the next
// message.
func TestPoisonCrashLoopOnSQLite(t *testing.T) {
	t.Parallel()
	s := setup(t, "poisoncrash")
	const key = "order-poison"
	src := order(key)
	src.Payload = append([]byte("pay 10 \x00\xff "), bytes.Repeat([]byte{0xfe}, 64<<10)...)
	src.Metadata.Set("note", "caf\xe9 \x01")
	s.publish(t, src)
	cfg := poisonConfig{Prefix: s.n.Prefix, SQLite: filepath.Join(t.TempDir(), "dedup.db"), PoisonKey: key}

	start := func() *childproc.Proc {
		cfg.Consumer = fmt.Sprintf("consumer-%d-%s", s.seq.Add(1), randomHex(3))
		raw, err := json.Marshal(cfg)
		require.NoError(t, err)
		c := childproc.Start(t, cfg.Consumer, []string{poisonChildEnv + "=1", poisonChildConfigEnv + "=" + string(raw), "SURELY_REDIS_URL=" + s.url})
		c.WaitFor(t, 20*time.Second, "READY ")
		return c
	}
	var died []string
	var c *childproc.Proc
	for restart := 0; restart < 8; restart++ {
		c = start()
		line := c.WaitFor(t, 30*time.Second, "RUN "+key, "OUTCOME dead_lettered "+key)
		if strings.HasPrefix(line, "OUTCOME") {
			require.True(t, strings.HasSuffix(line, " exhausted"), line)
			break
		}
		f := strings.Fields(line) // RUN <key> <attempt> exit|kill
		died = append(died, f[2]+":"+f[3])
		if f[3] == "exit" {
			select {
			case <-c.Exited():
				require.Equal(t, poisonExitCode, c.Cmd.ProcessState.ExitCode(), "the child exited by itself")
			case <-time.After(20 * time.Second):
				t.Fatal("the child did not exit")
			}
		} else {
			c.WaitFor(t, 10*time.Second, "AT "+key)
			c.Kill()
		}
		c = nil
	}
	require.NotNil(t, c, "not dead-lettered after 8 consumer processes (deaths %v)", died)
	require.Equal(t, []string{"1:exit", "2:kill", "3:exit"}, died, "one durable attempt per dead process")

	// The consumer that dead-lettered it goes on with the next message.
	good := order("order-good")
	last := s.publish(t, good)
	c.WaitFor(t, 20*time.Second, "OUTCOME processed order-good 1")
	s.waitAcked(t, last, 20*time.Second)

	dead := s.deadLetters(t)
	require.NotEmpty(t, dead)
	for _, d := range dead { // one per delivery that found the record exhausted
		require.Equal(t, envelope.DeadLetterUUID(src.UUID), d.UUID)
		require.True(t, bytes.Equal(src.Payload, d.Payload), "payload byte for byte")
		for k, v := range src.Metadata {
			require.Equal(t, v, d.Metadata.Get(k), "metadata %q", k)
		}
		require.Equal(t, string(dlq.ReasonExhausted), d.Metadata.Get(dlq.KeyReason))
		require.Equal(t, "3", d.Metadata.Get(dlq.KeyAttempts), "counted across process deaths")
		hist, err := envelope.ParseHistory(d.Metadata.Get(dlq.KeyHistory))
		require.NoError(t, err)
		require.Len(t, hist, 3)
		for i, h := range hist {
			require.Equal(t, i+1, h.Attempt)
			require.Equal(t, idempotency.ResultUnknown, h.Result, "each owner died holding its lease")
		}
	}

	db, err := sql.Open("sqlite", "file:"+cfg.SQLite+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	store, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	rec, err := store.Get(t.Context(), namespace, key)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateExhausted, rec.State)
	require.Equal(t, 3, rec.Attempts)
	rec, err = store.Get(t.Context(), namespace, "order-good")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
}
