package amqp_test

// The crash test kills a real consumer process (this test binary,
// re-executed with childEnv set, see TestMain) with SIGKILL while its
// handler runs, and checks that RabbitMQ hands the message to the consumer
// that is left.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
)

const (
	childEnv      = "SURELY_AMQP_CRASH_CHILD" // "1" makes TestMain run childMain
	childQueueEnv = "SURELY_AMQP_CRASH_QUEUE"
	// childMaxLife ends a child that nobody killed (a bug in a test).
	childMaxLife = 60 * time.Second
)

// childMain consumes the queue of its environment through handler.New; its
// handler prints "RUNNING <uuid> <count>" and blocks until the process is
// killed. It prints "READY" once it consumes.
func childMain() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), childMaxLife)
	defer cancel()
	sub, err := surelyamqp.NewSubscriber(os.Getenv("SURELY_AMQP_URL"))
	if err != nil {
		return fail(err)
	}
	store, err := memstore.New()
	if err != nil {
		return fail(err)
	}
	h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
		info, _ := delivery.InfoFrom(msg.Context())
		fmt.Printf("RUNNING %s %d\n", msg.UUID, info.Count)
		<-ctx.Done()
		return nil, ctx.Err()
	}, handler.WithStore(store, "orders"), handler.WithDeadLetter(faults.NewPublisher(0), deadTopic))
	if err != nil {
		return fail(err)
	}
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return fail(err)
	}
	r.AddConsumerHandler(handlerName, os.Getenv(childQueueEnv), sub, handler.NoPublish(h))
	go func() {
		<-r.Running()
		fmt.Println("READY")
	}()
	if err := r.Run(ctx); err != nil {
		return fail(err)
	}
	return 1 // not killed in time
}

func TestKilledConsumersMessageGoesToAnother(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The queue exists before either consumer starts.
	sub, err := surelyamqp.NewSubscriber(e.url)
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(e.topic))
	require.NoError(t, sub.Close())

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childQueueEnv+"="+e.topic, "SURELY_AMQP_URL="+e.url)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 16)
	go func() {
		defer close(exited)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
	}()
	require.Equal(t, "READY", receive(t, lines))
	msg := e.publish(t, "order-1", "pay 10")
	require.Equal(t, fmt.Sprintf("RUNNING %s 1", msg.UUID), receive(t, lines))

	// A second consumer: the message is the first one's until it dies.
	infos := make(chan delivery.Info, 4)
	_, stop := e.consume(t, nil, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		info, _ := delivery.InfoFrom(msg.Context())
		infos <- info
		return nil, nil
	}))
	select {
	case info := <-infos:
		t.Fatalf("delivered to the second consumer while the first one holds it: %+v", info)
	case <-time.After(300 * time.Millisecond):
	}

	killed := time.Now()
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no deferred code, no graceful close
	require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, receive(t, infos),
		"the killed consumer's unacked message is redelivered, counted")
	t.Logf("redelivered %v after the kill", time.Since(killed))
	require.Eventually(t, func() bool {
		got := e.rec.all()
		return len(got) == 1 && got[0].chainErr == nil
	}, 10*time.Second, 10*time.Millisecond)
	stop()
	require.Zero(t, e.ready(t, e.topic))
	<-exited
	for l := range lines {
		require.False(t, strings.HasPrefix(l, "RUNNING"), "the child ran only once: %s", l)
	}
}
