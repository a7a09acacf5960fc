package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/retry"
)

// Crash points: the child's environment arms one (crashAtEnv), and the
// child prints crashMarker, the point and the reservation id on stdout
// when a delivery gets there, then blocks until the parent kills it.
const (
	crashAtEnv        = "SURELY_INVENTORY_CRASH_AT"
	crashMarker       = "SURELY-INVENTORY-CRASH-POINT"
	pointBeforeEffect = "before-effect" // in the inbox transaction, before the stock is read
	pointInTx         = "in-tx"         // after the UPDATE and INSERT, before COMMIT
	pointAfterCommit  = "after-commit"  // after the chain returned nil, before the ack
)

// Consumer settings: short, so that a killed consumer's messages come back
// within a second or two (AckWait) and its claims are taken over as soon
// (the lease).
const (
	namespace   = "reserve-inventory"
	ackWait     = time.Second
	lease       = 1500 * time.Millisecond
	concurrency = 4
	// maxAttempts is the durable attempt budget of a reservation. Every claim
	// counts, the claims of killed consumers too (that is how a message that
	// crashes every consumer ends in the dead letter): it must exceed the
	// kills a single reservation can be in flight for.
	maxAttempts = 20
	// work is the time a reservation takes before its effect, so that the
	// workload lasts long enough for the kills to land mid-stream.
	work = 15 * time.Millisecond
)

// consumer is the child process's side: the inbox handler and the
// dead-letter recorder on the run's tables.
type consumer struct {
	db      *sql.DB
	store   *sqlstore.Store
	n       names
	crashAt string
	marked  sync.Once
	// committed holds the deliveries whose inbox transaction committed in
	// this delivery (outcome processed, as opposed to a duplicate or a dead
	// letter), for the after-commit crash point.
	committed sync.Map // *message.Message -> struct{}
}

// runConsumer is the child: it consumes the run's topic until it is killed
// or interrupted.
func runConsumer(ctx context.Context, n names, postgresURL, natsURL, crashAt string) error {
	switch crashAt {
	case "", pointBeforeEffect, pointInTx, pointAfterCommit:
	default:
		return fmt.Errorf("%s=%q: unknown crash point", crashAtEnv, crashAt)
	}
	if n.suffix == "" {
		return errors.New("-consume needs -suffix")
	}
	db, err := openPostgres(ctx, postgresURL)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	store, err := newStore(db, n)
	if err != nil {
		return err
	}
	c := &consumer{db: db, store: store, n: n, crashAt: crashAt}

	sub, err := surelynats.NewSubscriber(natsURL, n.consumer, delivery.WithAckWait(ackWait), delivery.WithConcurrency(concurrency))
	if err != nil {
		return err
	}
	deadSub, err := surelynats.NewSubscriber(natsURL, n.deadConsumer, delivery.WithAckWait(ackWait))
	if err != nil {
		_ = sub.Close()
		return err
	}
	pub, err := surelynats.NewPublisher(natsURL)
	if err != nil {
		_ = sub.Close()
		_ = deadSub.Close()
		return err
	}
	defer func() { _ = pub.Close() }() // after the router: the chain publishes dead letters through it

	router, err := c.router(sub, deadSub, pub)
	if err != nil {
		_ = sub.Close()
		_ = deadSub.Close()
		return err
	}
	// Run closes both subscribers when it returns: on ctx's end (Ctrl-C, or
	// the parent's SIGINT once everything is settled).
	return router.Run(ctx)
}

// router assembles the consumer: handler.New's chain around the inbox,
// the after-commit crash point around that chain, and the dead-letter
// recorder.
func (c *consumer) router(sub, deadSub message.Subscriber, pub message.Publisher) (*message.Router, error) {
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(maxAttempts), retry.WithInProcessAttempts(2),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(lease/2))
	if err != nil {
		return nil, err
	}
	extractor, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromJSONField("reservation_id")))
	if err != nil {
		return nil, err
	}
	h, err := handler.New(c.store.Inbox(c.reserve),
		handler.WithStore(c.store, namespace),
		handler.WithDeadLetter(pub, c.n.deadTopic),
		handler.WithPolicy(policy),
		handler.WithIdentity(extractor, handler.RejectMissingKey),
		handler.WithLease(lease),
		handler.WithStoreTimeout(time.Second), // shorter than the lease
		handler.WithConsumerGroup(c.n.consumer),
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			if p.Outcome == handler.OutcomeProcessed {
				c.committed.Store(p.Msg, struct{}{})
			}
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	reserve := router.AddConsumerHandler(namespace, c.n.topic, sub, handler.NoPublish(h))
	reserve.AddMiddleware(c.crashAfterCommit)
	router.AddConsumerHandler("record-dead-letters", c.n.deadTopic, deadSub, c.recordDeadLetter)
	return router, nil
}

// reserve is the business handler, run inside the inbox transaction: the
// stock decrement, the reservation row and surely's DONE mark commit
// together or not at all. An unknown SKU (or too little stock) is a
// permanent error: no retry, straight to the dead letter.
func (c *consumer) reserve(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
	var r reservation
	if err := json.Unmarshal(msg.Payload, &r); err != nil {
		return nil, retry.Permanent(fmt.Errorf("malformed reservation: %w", err))
	}
	if r.Quantity <= 0 {
		return nil, retry.Permanent(fmt.Errorf("reservation %s: quantity %d", r.ID, r.Quantity))
	}
	time.Sleep(work)
	c.crashPoint(pointBeforeEffect, r.ID)

	var onHand int
	err := tx.QueryRowContext(ctx, `SELECT quantity FROM `+c.n.stock+` WHERE sku = $1 FOR UPDATE`, r.SKU).Scan(&onHand)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, retry.Permanent(fmt.Errorf("reservation %s: unknown SKU %q", r.ID, r.SKU))
	case err != nil:
		return nil, err
	case onHand < r.Quantity:
		return nil, retry.Permanent(fmt.Errorf("reservation %s: %d of %s on hand, %d wanted", r.ID, onHand, r.SKU, r.Quantity))
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+c.n.stock+` SET quantity = quantity - $1 WHERE sku = $2`, r.Quantity, r.SKU); err != nil {
		return nil, err
	}
	op, _ := idempotency.OperationFrom(ctx)
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+c.n.reservations+` (reservation_id, sku, quantity, message_uuid, attempt)
		VALUES ($1, $2, $3, $4, $5)`, r.ID, r.SKU, r.Quantity, msg.UUID, op.Attempt); err != nil {
		return nil, err
	}
	c.crashPoint(pointInTx, r.ID)
	return nil, nil
}

// crashAfterCommit is a router middleware outside handler.New's chain: when
// the chain returned nil for a delivery that committed, the router is
// about to ack it; the after-commit crash point stops it right there.
func (c *consumer) crashAfterCommit(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		msgs, err := h(msg)
		_, committed := c.committed.LoadAndDelete(msg)
		if err == nil && committed && c.crashAt == pointAfterCommit {
			var r reservation
			_ = json.Unmarshal(msg.Payload, &r) // it was committed: it decodes
			c.crashPoint(pointAfterCommit, r.ID)
		}
		return msgs, err
	}
}

// crashPoint blocks the delivery at point when the child is armed for it:
// the first one to get there prints the marker, and the parent, reading it,
// kills the process.
func (c *consumer) crashPoint(point, id string) {
	if c.crashAt != point {
		return
	}
	c.marked.Do(func() { fmt.Println(crashMarker, point, id) }) // stdout is unbuffered
	time.Sleep(time.Minute)                                     // the parent kills us before
	fmt.Fprintln(os.Stderr, "inventory consumer: not killed at", point)
	os.Exit(3)
}

// recordDeadLetter keeps each dead letter once, by UUID: every copy of one
// message's dead letter has the same UUID (dlq's derived UUID), and a
// killed consumer's dead letters can come again.
func (c *consumer) recordDeadLetter(msg *message.Message) error {
	md := msg.Metadata
	_, err := c.db.ExecContext(msg.Context(), `INSERT INTO `+c.n.deadLetters+` (uuid, op_key, reason, error)
		VALUES ($1, $2, $3, $4) ON CONFLICT (uuid) DO NOTHING`,
		msg.UUID, md.Get(dlq.KeyOperationKey), md.Get(dlq.KeyReason), md.Get(dlq.KeyError))
	return err
}
