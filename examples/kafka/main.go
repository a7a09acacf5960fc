// Command kafka runs surely on Kafka with no server to install: an
// in-process Kafka cluster (franz-go's kfake, one broker listening on a
// random 127.0.0.1 port) carries the orders and their dead letters through
// surely's Kafka adapter, and SQLite (a file in a temporary directory that
// is removed at the end) is both the transactional inbox and the business
// database.
//
// It publishes a batch of orders through propagate.NewPublisher, which
// stamps each message with its operation key, the order ID. Some orders are
// published twice (the producer could not confirm its first publish and
// sent the order again, as a new message: another UUID, the same key), some
// fail their first attempt (the warehouse timed out) and two are poison (an
// unknown product: a permanent error). A consumer in a Kafka consumer group
// ships them with handler.New, each shipment written in the inbox
// transaction, and dead-letters the poison orders to the Kafka topic
// orders.dead, which a second consumer group records. Then it prints the
// dead letters, the retried attempts and
//
//	summary: published=N processed=N duplicates=N retried=N dead_lettered=N lost=0 double_effects=0
//
// processed counts the orders shipped (rows of the business table),
// duplicates the deliveries acked without running (their order was already
// shipped), retried the attempts that failed transiently and were tried
// again (from the inbox's attempt ledger), dead_lettered the dead letters
// recorded from orders.dead. lost counts the orders neither shipped nor
// dead-lettered and double_effects those shipped more than once, both read
// from the SQLite tables: surely's promise is that they stay 0.
//
//	go run ./examples/kafka
//
// kfake stands in for Kafka here and in surely's tests only; in production
// the same adapter calls point at real brokers.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	surelykafka "github.com/surely-dev/surely/adapters/kafka"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/propagate"
	"github.com/surely-dev/surely/retry"
)

const (
	topic     = "orders"
	deadTopic = "orders.dead"
	group     = "ship-orders"      // the consumer group, and the dedup namespace
	deadGroup = "ship-orders-dead" // the group that records the dead letters
	// orderID is the metadata entry with the business key of an order.
	orderID = "order_id"
	// timeout bounds the whole run.
	timeout = 60 * time.Second
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

// summary is the last line of the output.
type summary struct {
	Published, Processed, Duplicates, Retried, DeadLettered, Lost, DoubleEffects int
}

func (s summary) String() string {
	return fmt.Sprintf("summary: published=%d processed=%d duplicates=%d retried=%d dead_lettered=%d lost=%d double_effects=%d",
		s.Published, s.Processed, s.Duplicates, s.Retried, s.DeadLettered, s.Lost, s.DoubleEffects)
}

func run(ctx context.Context, w io.Writer) (summary, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	dir, err := os.MkdirTemp("", "surely-kafka-")
	if err != nil {
		return summary{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	cluster, err := startKafka(ctx)
	if err != nil {
		return summary{}, err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	app, err := openApp(ctx, filepath.Join(dir, "shop.db"))
	if err != nil {
		return summary{}, err
	}
	defer app.Close()

	// One Kafka publisher (a synchronous, idempotent Sarama producer) serves
	// the producer, through propagate, and the dead letters.
	kpub, err := surelykafka.NewPublisher(brokers)
	if err != nil {
		return summary{}, err
	}
	defer func() { _ = kpub.Close() }()

	batch := makeBatch()
	if err := publish(kpub, batch); err != nil {
		return summary{}, err
	}
	say(w, "published %d messages (%d orders) to topic %q of the in-process Kafka at %s\n",
		len(batch), len(distinct(batch)), topic, strings.Join(brokers, ","))

	c, err := startConsumer(ctx, brokers, kpub, app)
	if err != nil {
		return summary{}, err
	}
	werr := c.waitSettled(ctx, app, batch)
	c.Close()
	if werr != nil {
		return summary{}, werr
	}
	return report(ctx, w, app, batch, c.outcomes())
}

// startKafka starts a one-broker kfake cluster on a random loopback port,
// with the two topics of the example.
func startKafka(ctx context.Context) (*kfake.Cluster, error) {
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		// Loopback only, whatever kfake's default: nothing outside this
		// machine can reach the broker.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, port, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			var lc net.ListenConfig
			return lc.Listen(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}),
	)
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdmin(cluster.ListenAddrs(), sarama.NewConfig())
	if err != nil {
		cluster.Close()
		return nil, err
	}
	defer func() { _ = admin.Close() }()
	// The adapter never creates a topic implicitly: EnsureTopic does, once.
	for t, partitions := range map[string]int32{topic: 4, deadTopic: 1} {
		if err := surelykafka.EnsureTopic(admin, t, sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}); err != nil {
			cluster.Close()
			return nil, err
		}
	}
	return cluster, nil
}

// order is one published message: its order ID (the operation key) and body.
type order struct{ id, body string }

// makeBatch: 40 orders, every fifth published twice, every seventh failing
// its first attempt, and 2 poison orders.
func makeBatch() []order {
	var batch []order
	for i := 1; i <= 40; i++ {
		o := order{fmt.Sprintf("order-%d", i), fmt.Sprintf("ship order %d: %d x kettle", i, i%3+1)}
		if i%7 == 0 {
			o.body = "flaky " + o.body
		}
		batch = append(batch, o)
		if i%5 == 0 {
			batch = append(batch, o) // published again by a producer that timed out
		}
	}
	return append(batch,
		order{"order-41", "poison: ship order 41: 1 x product 0000"},
		order{"order-42", "poison: ship order 42: 2 x product 1111"})
}

// distinct returns the order IDs of batch, each once, in order.
func distinct(batch []order) []string {
	var ids []string
	seen := map[string]bool{}
	for _, o := range batch {
		if !seen[o.id] {
			seen[o.id] = true
			ids = append(ids, o.id)
		}
	}
	return ids
}

// publish sends every order as a new message. propagate stamps its
// operation key from the order ID (not from the UUID, which differs between
// the two copies of a re-sent order), its trace context and its publish
// time.
func publish(kpub message.Publisher, batch []order) error {
	pub, err := propagate.NewPublisher(kpub, propagate.WithKey(func(msg *message.Message) (string, error) {
		id := msg.Metadata.Get(orderID)
		if id == "" {
			return "", errors.New("no order ID")
		}
		return id, nil
	}))
	if err != nil {
		return err
	}
	for _, o := range batch {
		msg := message.NewMessage(watermill.NewUUID(), []byte(o.body))
		msg.Metadata.Set(orderID, o.id)
		if err := pub.Publish(topic, msg); err != nil {
			return err
		}
	}
	return nil
}

// app is the business side: a SQLite database with the shipments
// (deliberately without a unique constraint, so that a double shipment
// would show) and the dead letters received, and the inbox store on it.
type app struct {
	db    *sql.DB
	store *sqlstore.Store
}

func openApp(ctx context.Context, path string) (*app, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	store, err := sqlstore.New(db, sqlstore.SQLite, idempotency.WithRetention(time.Hour))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `
			CREATE TABLE IF NOT EXISTS shipments (op_key TEXT NOT NULL, body TEXT NOT NULL);
			CREATE TABLE IF NOT EXISTS dead_letters (uuid TEXT PRIMARY KEY, op_key TEXT, reason TEXT, error TEXT, partition INTEGER, kafka_offset INTEGER);`)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &app{db: db, store: store}, nil
}

func (a *app) Close() { _ = a.db.Close() }

// ship is the business handler. It runs inside the inbox transaction: the
// shipment row and the operation's DONE mark commit together or not at all.
func (a *app) ship(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
	op, _ := idempotency.OperationFrom(ctx)
	body := string(msg.Payload)
	switch {
	case strings.HasPrefix(body, "poison"):
		return nil, retry.Permanent(errors.New("unknown product"))
	case strings.HasPrefix(body, "flaky") && op.Attempt == 1:
		return nil, errors.New("warehouse API timed out")
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO shipments (op_key, body) VALUES (?, ?)`, op.Key, body)
	return nil, err
}

// recordDeadLetter keeps each dead letter once (by UUID), with where it
// sits in the dead-letter topic.
func (a *app) recordDeadLetter(msg *message.Message) error {
	partition, _ := wmkafka.MessagePartitionFromCtx(msg.Context())
	offset, _ := wmkafka.MessagePartitionOffsetFromCtx(msg.Context())
	md := msg.Metadata
	_, err := a.db.ExecContext(msg.Context(),
		`INSERT OR IGNORE INTO dead_letters (uuid, op_key, reason, error, partition, kafka_offset) VALUES (?, ?, ?, ?, ?, ?)`,
		msg.UUID, md.Get(dlq.KeyOperationKey), md.Get(dlq.KeyReason), md.Get(dlq.KeyError), partition, offset)
	return err
}

// consumer runs a router with the shipping handler and the dead-letter
// recorder, and counts the deliveries' outcomes.
type consumer struct {
	router *message.Router
	subs   []message.Subscriber
	done   chan struct{}

	mu     sync.Mutex
	counts map[handler.Outcome]int
}

func startConsumer(ctx context.Context, brokers []string, deadPub message.Publisher, a *app) (*consumer, error) {
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(2),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(time.Second))
	if err != nil {
		return nil, err
	}
	// The key is the one propagate stamped; a message without one is
	// dead-lettered (reason no_key), not deduplicated by its UUID.
	extractor, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	if err != nil {
		return nil, err
	}
	c := &consumer{done: make(chan struct{}), counts: map[handler.Outcome]int{}}
	h, err := handler.New(a.store.Inbox(a.ship),
		handler.WithStore(a.store, group),
		handler.WithDeadLetter(deadPub, deadTopic),
		handler.WithPolicy(policy),
		handler.WithIdentity(extractor, handler.RejectMissingKey),
		handler.WithLease(5*time.Second),
		handler.WithConsumerGroup(group),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			c.mu.Lock()
			c.counts[p.Outcome]++
			c.mu.Unlock()
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return nil, err
	}
	if c.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{}); err != nil {
		return nil, err
	}
	sub, err := surelykafka.NewSubscriber(brokers, group, delivery.WithCloseTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	deadSub, err := surelykafka.NewSubscriber(brokers, deadGroup, delivery.WithCloseTimeout(5*time.Second))
	if err != nil {
		_ = sub.Close()
		return nil, err
	}
	c.subs = []message.Subscriber{sub, deadSub}
	c.router.AddConsumerHandler("ship-orders", topic, sub, handler.NoPublish(h))
	c.router.AddConsumerHandler("record-dead-letters", deadTopic, deadSub, a.recordDeadLetter)
	go func() {
		defer close(c.done)
		if err := c.router.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
		}
	}()
	select {
	case <-c.router.Running():
	case <-c.done:
		c.Close()
		return nil, errors.New("the router stopped at start")
	}
	return c, nil
}

// Close closes the subscribers first: each waits for its messages in
// flight to be acked, then leaves its group, committing the offsets of every
// acked message, before Close returns (and the cluster goes away). Then it
// stops the router, which closes them again, harmlessly.
func (c *consumer) Close() {
	for _, s := range c.subs {
		_ = s.Close()
	}
	_ = c.router.Close()
	<-c.done
}

func (c *consumer) outcomes() map[handler.Outcome]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[handler.Outcome]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// waitSettled waits until every published message ended acked (processed,
// duplicate or dead-lettered) and every order is shipped or recorded as a
// dead letter.
func (c *consumer) waitSettled(ctx context.Context, a *app, batch []order) error {
	for {
		o := c.outcomes()
		acked := o[handler.OutcomeProcessed] + o[handler.OutcomeDuplicate] + o[handler.OutcomeDeadLettered]
		missing, err := a.unaccounted(ctx, batch)
		if err == nil && acked >= len(batch) && len(missing) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("timed out with %d of %d deliveries acked: %w", acked, len(batch), ctx.Err())
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unaccounted lists the orders neither shipped nor dead-lettered.
func (a *app) unaccounted(ctx context.Context, batch []order) ([]string, error) {
	var missing []string
	for _, id := range distinct(batch) {
		var n int
		err := a.db.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM shipments WHERE op_key = ?) +
			(SELECT COUNT(*) FROM dead_letters WHERE op_key = ?)`, id, id).Scan(&n)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// report prints the dead letters and the retried attempts, then the
// summary, counted from the business tables, the outcomes and the inbox's
// attempt ledger.
func report(ctx context.Context, w io.Writer, a *app, batch []order, outcomes map[handler.Outcome]int) (summary, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT op_key, reason, error, partition, kafka_offset FROM dead_letters ORDER BY op_key`)
	if err != nil {
		return summary{}, err
	}
	for rows.Next() {
		var key, reason, msg string
		var partition, offset int64
		if err := rows.Scan(&key, &reason, &msg, &partition, &offset); err != nil {
			_ = rows.Close()
			return summary{}, err
		}
		say(w, "dead letter: key=%q reason=%s error=%q at %s[%d]@%d\n", key, reason, msg, deadTopic, partition, offset)
	}
	if err := rows.Close(); err != nil {
		return summary{}, err
	}

	s := summary{Published: len(batch), Duplicates: outcomes[handler.OutcomeDuplicate]}
	for _, q := range []struct {
		dst   *int
		query string
	}{
		{&s.Processed, `SELECT COUNT(DISTINCT op_key) FROM shipments`},
		{&s.DoubleEffects, `SELECT COUNT(*) FROM (SELECT op_key FROM shipments GROUP BY op_key HAVING COUNT(*) > 1)`},
		{&s.DeadLettered, `SELECT COUNT(*) FROM dead_letters`},
	} {
		if err := a.db.QueryRowContext(ctx, q.query).Scan(q.dst); err != nil {
			return summary{}, err
		}
	}
	// retried: attempts that failed transiently and were tried again, from
	// each order's attempt ledger in the inbox.
	for _, id := range distinct(batch) {
		rec, err := a.store.Get(ctx, group, id)
		if errors.Is(err, idempotency.ErrNotFound) {
			continue
		}
		if err != nil {
			return summary{}, err
		}
		for _, h := range rec.History {
			if h.Result == idempotency.ResultFailed && h.Reason != "permanent" {
				s.Retried++
				say(w, "retried: key=%q attempt %d failed (%s), order now %s\n", id, h.Attempt, h.Error, rec.State)
			}
		}
	}
	missing, err := a.unaccounted(ctx, batch)
	if err != nil {
		return summary{}, err
	}
	for _, m := range missing {
		say(w, "lost: %s\n", m)
	}
	s.Lost = len(missing)
	say(w, "%s\n", s)
	if s.Lost != 0 || s.DoubleEffects != 0 {
		return s, fmt.Errorf("%d orders lost, %d shipped twice", s.Lost, s.DoubleEffects)
	}
	return s, nil
}

// say prints a line of the report; a failed write to w is not the
// example's concern.
func say(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
