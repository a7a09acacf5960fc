// Command deadletters fills a SQLite dead-letter archive the way a real
// outage does, so that "surely dlq" has something to operate on.
//
// A billing consumer (handler.New, SQLite dedup store) charges eight
// orders. The payment gateway is down for two of them (a transient error
// that outlasts the attempt budget: dead letter "exhausted") and refuses
// one card (a permanent error: dead letter "permanent"); the other five are
// charged. Dead letters land in the archive (dlq/sqlarchive) in the same
// SQLite file:
//
//	go run ./examples/deadletters -db /tmp/billing.db
//	surely dlq stats --archive sqlite:/tmp/billing.db
//
// With -consume, it runs the same consumer with the gateway repaired,
// reading the topic from Redis Streams (where "surely dlq replay --to
// redis://..." republishes), until -n messages were handled:
//
//	go run ./examples/deadletters -db /tmp/billing.db -consume redis://127.0.0.1:6379/0 -n 3
//
// The outage breaker is off, so that every failure reaches the dead
// letter at once; in production it pauses the consumer during an outage
// instead.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/surely-dev/surely/adapters/redisstream"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/retry"
)

const (
	topic     = "orders"
	namespace = "charge-payments"
)

// orders are the messages of the run: key and payload.
var orders = []struct{ key, body string }{
	{"order-1001", `{"order":1001,"amount":"19.90 EUR","card":"visa-4242"}`},
	{"order-1002", `{"order":1002,"amount":"5.00 EUR","card":"visa-4242"}`},
	{"order-1003", `{"order":1003,"amount":"120.00 EUR","card":"amex-0005"}`},
	{"order-1004", `{"order":1004,"amount":"42.00 EUR","card":"mc-5454"}`},
	{"order-1005", `{"order":1005,"amount":"9.99 EUR","card":"visa-4000-0002"}`},
	{"order-1006", `{"order":1006,"amount":"75.00 EUR","card":"mc-5454"}`},
	{"order-1007", `{"order":1007,"amount":"13.37 EUR","card":"visa-4242"}`},
	{"order-1008", `{"order":1008,"amount":"250.00 EUR","card":"amex-0005"}`},
}

// gatewayError is the payment gateway's outage.
type gatewayError struct{ addr string }

func (e *gatewayError) Error() string { return "dial tcp " + e.addr + ": connect: connection refused" }

func main() {
	var (
		dbPath  = flag.String("db", "deadletters.db", "SQLite file of the dedup store and the dead-letter archive")
		consume = flag.String("consume", "", "Redis URL: consume the topic from Redis Streams with the gateway repaired")
		n       = flag.Int("n", 1, "with -consume: stop after this many messages")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *consume != "" {
		err = runConsume(ctx, *dbPath, *consume, *n)
	} else {
		err = runOutage(ctx, *dbPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deadletters:", err)
		os.Exit(1)
	}
}

// open returns the store and the archive in the SQLite file, migrated.
func open(ctx context.Context, path string) (*sql.DB, *sqlstore.Store, *sqlarchive.Archive, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err == nil {
		err = store.Migrate(ctx)
	}
	var arch *sqlarchive.Archive
	if err == nil {
		arch, err = sqlarchive.New(db, sqlstore.SQLite)
	}
	if err == nil {
		err = arch.Migrate(ctx)
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, nil, err
	}
	return db, store, arch, nil
}

// charge is the business handler. While the gateway is down, orders
// 1003 and 1007 fail transiently; the card of order 1005 is always
// declined.
func charge(gatewayUp bool, charged *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		key := idempotency.KeyFrom(msg.Context())
		switch {
		case strings.Contains(string(msg.Payload), "visa-4000-0002"):
			return nil, retry.Permanent(fmt.Errorf("charge %s: card declined (do_not_honor)", key))
		case !gatewayUp && (key == "order-1003" || key == "order-1007"):
			return nil, fmt.Errorf("charge %s: %w", key, &gatewayError{"10.20.0.7:443"})
		}
		charged.Add(1)
		op, _ := idempotency.OperationFrom(msg.Context())
		fmt.Printf("charged %s (attempt %d)\n", key, op.Attempt)
		return nil, nil
	}
}

func chain(store idempotency.Store, arch archive.Archive, gatewayUp bool, charged *atomic.Int64) (message.HandlerFunc, error) {
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(3),
		retry.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return handler.New(charge(gatewayUp, charged),
		handler.WithStore(store, namespace),
		handler.WithDeadLetter(arch, "dead-letters"),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithConsumerGroup("billing"))
}

// runOutage charges every order once through GoChannel while the gateway
// is down for some of them, and waits until each order is charged or
// dead-lettered.
func runOutage(ctx context.Context, path string) error {
	db, store, arch, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	var charged atomic.Int64
	h, err := chain(store, arch, false, &charged)
	if err != nil {
		return err
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = pubSub.Close() }()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddConsumerHandler(namespace, topic, pubSub, handler.NoPublish(h))
	go func() { _ = router.Run(ctx) }()
	defer func() { _ = router.Close() }()
	<-router.Running()

	before, err := arch.Stats(ctx, archive.Filter{})
	if err != nil {
		return err
	}
	for i, o := range orders {
		msg := message.NewMessage(fmt.Sprintf("0190b5d2-7c4e-7a10-8000-%012d", 1001+i), []byte(o.body))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, o.key)
		msg.Metadata.Set("content-type", "application/json")
		if err := pubSub.Publish(topic, msg); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := arch.Stats(ctx, archive.Filter{})
		if err != nil {
			return err
		}
		dead := st.Total - before.Total
		if int(charged.Load())+dead >= len(orders) {
			fmt.Printf("charged %d, dead-lettered %d (archive: sqlite:%s)\n", charged.Load(), dead, path)
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for the consumer")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runConsume charges what arrives on the topic in Redis Streams, with the
// gateway repaired, until n messages were handled.
func runConsume(ctx context.Context, path, redisURL string, n int) error {
	db, store, arch, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	sub, err := redisstream.NewSubscriber(&redis.UniversalOptions{Addrs: []string{opts.Addr}, DB: opts.DB}, "billing")
	if err != nil {
		return err
	}
	defer func() { _ = sub.Close() }()
	var charged atomic.Int64
	h, err := chain(store, arch, true, &charged)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	for handled := 0; handled < n; handled++ {
		select {
		case msg := <-msgs:
			if _, err := h(msg); err != nil {
				msg.Nack()
				fmt.Printf("failed %s: %v\n", msg.Metadata.Get(idempotency.DefaultMetadataKey), err)
				continue
			}
			msg.Ack()
		case <-ctx.Done():
			return fmt.Errorf("after %d of %d messages: %w", handled, n, ctx.Err())
		}
	}
	return nil
}
