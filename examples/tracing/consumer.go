package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/retry"
)

// Environment of a consumer child process.
const (
	envRole    = "SURELY_TRACING_ROLE" // "consumer" in a child
	envName    = "SURELY_TRACING_NAME"
	envNATS    = "SURELY_TRACING_NATS"
	envDB      = "SURELY_TRACING_DB"
	envSpanDir = "SURELY_TRACING_SPANS"
)

// Lines a consumer prints, which the parent waits for.
const (
	markReady   = "ready"
	markRunning = "running attempt 1" // the attempt the parent kills
	markOutcome = "outcome "
)

// errGateway is attempt 2's failure.
var errGateway = errors.New("payment gateway timed out")

func openStore(ctx context.Context, path string) (*sql.DB, *sqlstore.Store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlstore.New(db, sqlstore.SQLite, idempotency.WithRetention(time.Hour))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, store, nil
}

// runConsumerProcess is the child: a router with the traced handler, until
// its stdin closes (the parent is done, or gone).
func runConsumerProcess() error {
	name := os.Getenv(envName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rec, err := newFileRecorder(spanFile(os.Getenv(envSpanDir), name), name)
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	db, store, err := openStore(ctx, os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()

	natsURL := os.Getenv(envNATS)
	sub, err := surelynats.NewSubscriber(natsURL, group, delivery.WithAckWait(2*time.Second))
	if err != nil {
		return err
	}
	pub, err := surelynats.NewPublisher(natsURL)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()

	h, err := newHandler(tp, store, pub)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddConsumerHandler("charge-payments", topic, sub, handler.NoPublish(h))
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()
	fmt.Println(markReady)

	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	_ = router.Close()
	return <-done
}

func spanFile(dir, process string) string { return dir + "/spans-" + process + ".jsonl" }

// newHandler is the traced payment handler. Its script, by durable attempt
// number: attempt 1 hangs (the parent kills its process), attempt 2 fails
// transiently, attempt 3 succeeds.
func newHandler(tp *sdktrace.TracerProvider, store idempotency.Store, dead message.Publisher) (message.HandlerFunc, error) {
	// One attempt per delivery, so each retry is a redelivery by the
	// broker and its link to the previous attempt comes from the store.
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(1), retry.WithMaxAttempts(5),
		retry.WithBackoff(50*time.Millisecond, 200*time.Millisecond), retry.WithMaxInProcessTime(time.Second))
	if err != nil {
		return nil, err
	}
	charge := func(msg *message.Message) ([]*message.Message, error) {
		op, _ := idempotency.OperationFrom(msg.Context())
		switch op.Attempt {
		case 1:
			fmt.Println(markRunning)
			<-msg.Context().Done() // hangs until the parent kills this process
			return nil, msg.Context().Err()
		case 2:
			return nil, errGateway
		}
		return nil, nil
	}
	return handler.New(charge,
		handler.WithStore(store, "charge-payments"),
		handler.WithDeadLetter(dead, deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(2*time.Second),
		handler.WithStoreTimeout(time.Second), // shorter than the lease
		handler.WithConsumerGroup(group),
		handler.WithTracerProvider(tp),
		handler.WithMessagingSystem("nats"),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			fmt.Printf("%s%s attempt=%d\n", markOutcome, p.Outcome, p.Attempt)
			return handler.OutcomeResult{}
		}),
	)
}
