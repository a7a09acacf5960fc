package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/childproc"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/retry"
)

// The environment that turns a test binary into the crash test's child.
const (
	childEnv       = "SURELY_ADAPTERTEST_CHILD"
	childConfigEnv = "SURELY_ADAPTERTEST_CHILD_CONFIG"
)

// childConfig configures a child consumer (JSON in childConfigEnv).
type childConfig struct {
	Name  string `json:"name"`
	Topic string `json:"topic"`
	Group string `json:"group"`
	// Store is the SharedStore's Name, StoreAt the location its Create
	// returned in the parent.
	Store   string `json:"store"`
	StoreAt string `json:"store_at"`
	// Effects is a file that each effect appends a line to: the key.
	Effects string        `json:"effects"`
	Lease   time.Duration `json:"lease"`
	// Crash makes the handler stop dead before its effect: it prints
	// "AT <key>" and blocks until the parent SIGKILLs the process.
	Crash bool `json:"crash"`
}

// ChildOption configures the child processes of RunChild.
type ChildOption func(*childOptions)

type childOptions struct {
	store SharedStore
}

// WithSharedStore makes the children open s, the SharedStore given to the
// parent in Features.SharedStore. Default: SQLiteStore.
func WithSharedStore(s SharedStore) ChildOption {
	return func(o *childOptions) { o.store = s }
}

// RunChild turns the test binary into the crash test's child consumer
// process when the suite started it, and never returns then (it exits
// when the parent kills it or closes its stdin); otherwise it returns at
// once. Call it first in the adapter test package's TestMain:
//
//	func TestMain(m *testing.M) {
//		adaptertest.RunChild(func(group string) (message.Subscriber, error) {
//			return mybroker.NewSubscriber(os.Getenv("MYBROKER_URL"), mybroker.Config{Group: group})
//		})
//		goleak.VerifyTestMain(m)
//	}
//
// The child consumes with a Watermill router and handler.New over the
// shared store (SQLiteStore unless WithSharedStore says otherwise: the
// same as Features.SharedStore), so that the parent and its children share
// the dedup records.
func RunChild(newSubscriber NewChildSubscriber, opts ...ChildOption) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	o := childOptions{store: SQLiteStore()}
	for _, opt := range opts {
		opt(&o)
	}
	if err := runChild(newSubscriber, o.store); err != nil {
		fmt.Fprintln(os.Stderr, "adaptertest child:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// runChild consumes the configured topic and prints one line per event:
//
//	READY <name>
//	RUN <key> <attempt> <delivery count> <name>
//	AT <key>
//	OUTCOME <outcome> <key> <attempt>
func runChild(newSubscriber NewChildSubscriber, shared SharedStore) error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if cfg.Store != shared.Name {
		return fmt.Errorf("the parent's shared store is %q, this child's %q: pass Features.SharedStore to RunChild with WithSharedStore", cfg.Store, shared.Name)
	}
	ctx, cancel := childproc.ChildContext()
	defer cancel()

	store, closeStore, err := shared.Open(ctx, cfg.StoreAt)
	if err != nil {
		return fmt.Errorf("shared store: %w", err)
	}
	defer func() { _ = closeStore() }()
	sub, err := newSubscriber(cfg.Group)
	if err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}

	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	business := func(msg *message.Message) ([]*message.Message, error) {
		mctx := msg.Context()
		op, ok := idempotency.OperationFrom(mctx)
		if !ok {
			return nil, errors.New("no operation in the context")
		}
		info, _ := delivery.InfoFrom(mctx)
		say("RUN %s %d %d %s", op.Key, op.Attempt, info.Count, cfg.Name)
		if cfg.Crash {
			say("AT %s", op.Key)
			time.Sleep(time.Hour) // the parent SIGKILLs us here
		}
		return nil, appendLine(cfg.Effects, op.Key)
	}
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(cfg.Lease/2))
	if err != nil {
		return err
	}
	h, err := handler.New(business,
		handler.WithStore(store, namespace),
		handler.WithDeadLetter(faults.NewPublisher(0), deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(cfg.Lease),
		handler.WithConsumerGroup(cfg.Group),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			say("OUTCOME %s %s %d", p.Outcome, p.Msg.Metadata.Get(idempotency.DefaultMetadataKey), p.Attempt)
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddConsumerHandler(handlerName, cfg.Topic, sub, handler.NoPublish(h))
	errc := make(chan error, 1)
	go func() { errc <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-errc:
		return fmt.Errorf("router: %w", err)
	}
	say("READY %s", cfg.Name)
	return <-errc
}

// testCrash: a consumer process SIGKILLed in the middle of its handler,
// before the effect; the message goes to another consumer process of the
// group, whose attempt runs the effect: once.
func testCrash(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	if f.NoCrashRecovery {
		t.Skip("Features.NoCrashRecovery: unacked messages die with the consumer process")
	}
	shared := f.sharedStore()
	require.NotNil(t, shared.Create, "SharedStore.Create")
	require.NotNil(t, shared.Open, "SharedStore.Open")
	e := setup(t, newAdapter, f)
	location := shared.Create(t)
	// Opened (and its schema made) before the children open it too.
	store, closeStore, err := shared.Open(t.Context(), location)
	require.NoError(t, err, "SharedStore.Open")
	t.Cleanup(func() { require.NoError(t, closeStore(), "closing the shared store") })
	cfg := childConfig{
		Topic: e.topic, Group: e.group, Lease: f.AckWait,
		Store: shared.Name, StoreAt: location,
		Effects: filepath.Join(t.TempDir(), "effects"),
	}

	const key = "order-crash"
	cfg.Name, cfg.Crash = "first", true
	first := startChild(t, e.a, cfg)
	e.publish(t, order(key, "pay 10"))
	first.WaitFor(t, waitTimeout, "AT "+key)
	first.Kill()

	cfg.Name, cfg.Crash = "second", false
	second := startChild(t, e.a, cfg)
	run := strings.Fields(second.WaitFor(t, waitTimeout+3*f.AckWait, "RUN "+key+" "))
	second.WaitFor(t, waitTimeout, "OUTCOME processed "+key+" ")

	attempt, err := strconv.Atoi(run[2])
	require.NoError(t, err)
	require.Equal(t, 2, attempt, "the killed consumer's claim is counted")
	count, err := strconv.Atoi(run[3])
	require.NoError(t, err)
	if f.DeliveryCount {
		require.GreaterOrEqual(t, count, 2, "the redelivery's delivery count")
	}
	raw, err := os.ReadFile(cfg.Effects)
	require.NoError(t, err, "no effect happened")
	require.Equal(t, []string{key}, strings.Fields(string(raw)), "the effect happened once")

	rec, err := store.Get(t.Context(), namespace, key)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 2, rec.Attempts)
	require.Len(t, rec.History, 2)
	require.Equal(t, idempotency.ResultUnknown, rec.History[0].Result, "the killed attempt's lease expired")
}

// appendLine appends line and a newline to the file at path, creating it.
// One write of a file opened O_APPEND: lines of several processes do not
// interleave.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ---- child processes ----

// child is a consumer process: the test binary re-executed with childEnv=1.
type child = childproc.Proc

// startChild starts a consumer process with cfg and waits until its router
// runs. It is SIGKILLed when the test ends at the latest.
func startChild(t *testing.T, a Adapter, cfg childConfig) *child {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	env := append(a.ChildEnv(), childEnv+"=1", childConfigEnv+"="+string(raw))
	c := childproc.Start(t, cfg.Name, env)
	c.Hint = " (does the adapter's TestMain call adaptertest.RunChild?)"
	c.WaitFor(t, waitTimeout, "READY ")
	return c
}
