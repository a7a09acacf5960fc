// Command rabbitmq shows the RabbitMQ adapter and handler.New together,
// with the Redis store in lease mode. It needs a RabbitMQ server
// (SURELY_AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/) and a Redis
// server (SURELY_REDIS_URL, default redis://127.0.0.1:6379); without them
// it exits with a one-line reason.
//
// It publishes orders with duplicates, orders whose first attempt fails
// and poison orders to a quorum queue of its own, consumes them, and prints
//
//	summary: published=N processed=N duplicates=N retried=N dead_lettered=N lost=0 double_effects=0
//
// Its queues and Redis keys carry a random suffix and are deleted at the end.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/retry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

type tally struct {
	mu       sync.Mutex
	effects  map[string]int // operation key → effects
	failed   map[string]bool
	dead     map[string]string // operation key → reason
	outcomes map[handler.Outcome]int
	retried  int
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	amqpURL := env("SURELY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	redisURL := env("SURELY_REDIS_URL", "redis://127.0.0.1:6379")

	suffix := watermill.NewShortUUID()
	queue, deadQueue, prefix := "surely-example-orders-"+suffix, "surely-example-orders-dead-"+suffix, "surely-example:"+suffix+":"

	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	client := redis.NewClient(opt)
	defer func() { _ = client.Close() }()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("needs Redis at %s (set SURELY_REDIS_URL): %w", redisURL, err)
	}
	defer cleanupRedis(client, prefix)
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		return fmt.Errorf("needs RabbitMQ at %s (set SURELY_AMQP_URL): %w", amqpURL, err)
	}
	defer func() { _ = conn.Close() }()
	defer deleteQueues(conn, queue, deadQueue)

	store, err := redisstore.New(ctx, client, redisstore.WithPrefix(prefix))
	if err != nil {
		return err
	}
	pub, err := surelyamqp.NewPublisher(amqpURL)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	sub, err := surelyamqp.NewSubscriber(amqpURL, delivery.WithConcurrency(4))
	if err != nil {
		return err
	}
	deadSub, err := surelyamqp.NewSubscriber(amqpURL)
	if err != nil {
		return err
	}

	t := &tally{effects: map[string]int{}, failed: map[string]bool{}, dead: map[string]string{}, outcomes: map[handler.Outcome]int{}}
	fulfil := func(msg *message.Message) ([]*message.Message, error) {
		key, body := idempotency.KeyFrom(msg.Context()), string(msg.Payload)
		t.mu.Lock()
		defer t.mu.Unlock()
		switch {
		case strings.HasPrefix(body, "poison"):
			return nil, retry.Permanent(errors.New("unknown product"))
		case strings.HasPrefix(body, "flaky") && !t.failed[key]:
			t.failed[key] = true
			t.retried++
			return nil, errors.New("warehouse API timed out")
		}
		t.effects[key]++
		return nil, nil
	}
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(2),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(time.Second))
	if err != nil {
		return err
	}
	h, err := handler.New(fulfil,
		handler.WithStore(store, "fulfil-orders"),
		handler.WithDeadLetter(pub, deadQueue),
		handler.WithPolicy(policy),
		handler.WithLease(5*time.Second),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			t.mu.Lock()
			t.outcomes[p.Outcome]++
			t.mu.Unlock()
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddConsumerHandler("fulfil-orders", queue, sub, handler.NoPublish(h))
	router.AddConsumerHandler("record-dead-letters", deadQueue, deadSub, func(m *message.Message) error {
		t.mu.Lock()
		t.dead[m.Metadata.Get(dlq.KeyOperationKey)] = m.Metadata.Get(dlq.KeyReason)
		t.mu.Unlock()
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	defer func() { _ = router.Close() }()
	<-router.Running()

	// 50 orders, every fifth published twice, every ninth failing its first
	// attempt, and 2 poison orders.
	var keys []string
	published := 0
	send := func(key, body string) error {
		msg := message.NewMessage(watermill.NewUUID(), []byte(body))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
		published++
		return pub.Publish(queue, msg)
	}
	for i := 1; i <= 52; i++ {
		key, body := fmt.Sprintf("order-%d", i), fmt.Sprintf("ship order %d", i)
		switch {
		case i > 50:
			body = "poison " + body
		case i%9 == 0:
			body = "flaky " + body
		}
		keys = append(keys, key)
		if err := send(key, body); err != nil {
			return err
		}
		if i%5 == 0 && i <= 50 {
			if err := send(key, body); err != nil {
				return err
			}
		}
	}

	for {
		t.mu.Lock()
		acked := t.outcomes[handler.OutcomeProcessed] + t.outcomes[handler.OutcomeDuplicate] + t.outcomes[handler.OutcomeDeadLettered]
		deadSeen := len(t.dead)
		t.mu.Unlock()
		if acked >= published && deadSeen >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out: %d of %d deliveries acked", acked, published)
		case <-time.After(20 * time.Millisecond):
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	lost, double := 0, 0
	for _, k := range keys {
		if t.effects[k] == 0 && t.dead[k] == "" {
			lost++
			fmt.Println("lost:", k)
		}
		if t.effects[k] > 1 {
			double++
		}
	}
	for k, reason := range t.dead {
		fmt.Printf("dead letter: key=%q reason=%s\n", k, reason)
	}
	fmt.Printf("summary: published=%d processed=%d duplicates=%d retried=%d dead_lettered=%d lost=%d double_effects=%d\n",
		published, t.outcomes[handler.OutcomeProcessed], t.outcomes[handler.OutcomeDuplicate], t.retried,
		t.outcomes[handler.OutcomeDeadLettered], lost, double)
	if lost != 0 || double != 0 {
		return errors.New("an order was lost or fulfilled twice")
	}
	return nil
}

func deleteQueues(conn *amqp091.Connection, queues ...string) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	for _, q := range queues {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
}

func cleanupRedis(client *redis.Client, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
}
