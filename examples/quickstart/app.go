package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// app is the business side: a SQLite database with the payments charged
// (deliberately without a unique constraint, so a double charge would
// show), the dead letters, and a log of delivery outcomes.
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
			CREATE TABLE IF NOT EXISTS charges (op_key TEXT NOT NULL, body TEXT NOT NULL);
			CREATE TABLE IF NOT EXISTS dead_letters (uuid TEXT PRIMARY KEY, op_key TEXT, body TEXT, reason TEXT, error TEXT);
			CREATE TABLE IF NOT EXISTS outcomes (outcome TEXT NOT NULL);`)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &app{db: db, store: store}, nil
}

func (a *app) Close() { _ = a.db.Close() }

// charge is the business handler. It runs inside the inbox transaction:
// the charge row and the DONE mark commit together or not at all.
func (a *app) charge(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
	op, _ := idempotency.OperationFrom(ctx)
	body := string(msg.Payload)
	switch {
	case strings.HasPrefix(body, "poison"):
		return nil, handler.Permanent(errors.New("card number is not valid"))
	case strings.HasPrefix(body, "flaky") && op.Attempt == 1:
		return nil, errors.New("payment gateway timed out")
	}
	time.Sleep(40 * time.Millisecond) // a little work, so that kills land mid-flight
	_, err := tx.ExecContext(ctx, `INSERT INTO charges (op_key, body) VALUES (?, ?)`, op.Key, body)
	return nil, err
}

// outcome records how a delivery ended, and each dead letter once (by the
// message UUID): a message may be dead-lettered more than once when it is
// redelivered. The chain reports a dead letter only once its publish
// succeeded, and before it acks the message.
func (a *app) outcome(ctx context.Context, p handler.OutcomeParams) handler.OutcomeResult {
	ctx = context.WithoutCancel(ctx)
	_, _ = a.db.ExecContext(ctx, `INSERT INTO outcomes (outcome) VALUES (?)`, string(p.Outcome))
	if p.Outcome == handler.OutcomeDeadLettered {
		_, _ = a.db.ExecContext(ctx, `INSERT OR IGNORE INTO dead_letters (uuid, op_key, body, reason, error) VALUES (?, ?, ?, ?, ?)`,
			p.Msg.UUID, p.Key, string(p.Msg.Payload), p.Reason, fmt.Sprint(p.Cause))
	}
	return handler.OutcomeResult{}
}

type consumer struct {
	router *message.Router
	done   chan struct{}
}

// startConsumer runs a router with the payment handler until ctx ends or
// Close.
func startConsumer(ctx context.Context, natsURL string, a *app) (*consumer, error) {
	logger := watermill.NopLogger{}
	sub, err := surelynats.NewSubscriber(natsURL, consumerName, delivery.WithAckWait(2*time.Second), delivery.WithConcurrency(4))
	if err != nil {
		return nil, err
	}
	pub, err := surelynats.NewPublisher(natsURL)
	if err != nil {
		return nil, err
	}
	// Only the metadata key counts: a message without one is dead-lettered
	// (reason no_key) instead of being deduplicated by its UUID.
	extractor, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	if err != nil {
		return nil, err
	}
	h, err := handler.New(a.store.Inbox(a.charge),
		handler.WithStore(a.store, "charge-payments"),
		handler.WithDeadLetter(pub, deadTopic),
		// Every attempt counts, also one whose process was killed (that is
		// how a message that crashes its consumer every time ends in the
		// dead letter): a budget of 10 keeps the five kills of -crash from
		// exhausting one.
		handler.WithMaxAttempts(10),
		handler.WithInProcessAttempts(2),
		handler.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		handler.WithMaxInProcessTime(500*time.Millisecond),
		handler.WithIdentity(extractor, handler.RejectMissingKey),
		handler.WithLease(2*time.Second),
		handler.WithStoreTimeout(time.Second), // shorter than the lease
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithOnOutcome(a.outcome),
	)
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	router.AddConsumerHandler("charge-payments", topic, sub, handler.NoPublish(h))
	c := &consumer{router: router, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := router.Run(ctx); err != nil {
			fmt.Println("router:", err)
		}
		_ = pub.Close()
	}()
	select {
	case <-router.Running():
	case <-c.done:
		return nil, errors.New("the router stopped at start")
	}
	return c, nil
}

func (c *consumer) Close() {
	_ = c.router.Close()
	<-c.done
}

// charged counts the charge rows.
func (a *app) charged(ctx context.Context) int {
	var n int
	_ = a.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM charges`).Scan(&n)
	return n
}
