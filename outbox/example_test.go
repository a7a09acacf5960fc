package outbox_test

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"os/signal"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/outbox"
)

// The payment, its DONE mark and its "orders.paid" event commit in one
// transaction; the forwarder then publishes the event to the broker (a
// GoChannel here), with the UUID it was published with. It needs a
// PostgreSQL server, so it is compiled, not run.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = db.Close() }() // yours: neither the store nor the outbox closes it

	store, err := sqlstore.New(db, sqlstore.Postgres)
	if err != nil {
		panic(err)
	}
	ob, err := outbox.New(db)
	if err != nil {
		panic(err)
	}
	// Or create the tables in your migrations.
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}

	pay := func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		order := idempotency.KeyFrom(ctx)
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET paid = true WHERE id = $1`, order); err != nil {
			return nil, err
		}
		paid := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"`+order+`"}`))
		// Into tx: forwarded if and only if tx commits. Nothing is returned
		// for the router to publish.
		return nil, ob.Publisher(tx).Publish("orders.paid", paid)
	}

	broker := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = broker.Close() }()
	h, err := handler.New(store.Inbox(pay),
		handler.WithStore(store, "payments"),
		handler.WithDeadLetter(broker, "payments.dead"))
	if err != nil {
		panic(err)
	}

	// One or more processes run a forwarder; it owns no broker client.
	fwd, err := ob.Forwarder(broker, outbox.WithLogger(slog.Default()))
	if err != nil {
		panic(err)
	}
	go func() {
		if err := fwd.Run(ctx); err != nil {
			slog.Error("outbox forwarder", "err", err)
		}
	}()
	defer func() { _ = fwd.Close() }()

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(slog.Default()))
	if err != nil {
		panic(err)
	}
	// The handler returns no messages; a publish topic keeps the chain's
	// contract (anything returned is published before the ack).
	router.AddHandler("payments", "payments", broker, "payments.out", broker, h)
	if err := router.Run(ctx); err != nil {
		panic(err)
	}
}
