package nats_test

import (
	"context"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// The adapter's subscriber and publisher with handler.New on a Watermill
// router: the chain reads the delivery facts the subscriber puts in each
// message's context (delivery count, nack with delay, lease extension).
func Example() {
	ctx := context.Background()
	// A stream capturing "payments" must exist: see EnsureStream.
	sub, err := surelynats.NewSubscriber("nats://127.0.0.1:4222", "billing", delivery.WithConcurrency(4))
	if err != nil {
		log.Fatal(err)
	}
	pub, err := surelynats.NewPublisher("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = pub.Close() }()

	store, err := memstore.New() // use redisstore or sqlstore in production
	if err != nil {
		log.Fatal(err)
	}
	h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
		return nil, nil // the business effect
	},
		handler.WithStore(store, "charge-payments"),
		handler.WithDeadLetter(pub, "payments.dead"),
	)
	if err != nil {
		log.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddConsumerHandler("charge-payments", "payments", sub, handler.NoPublish(h))
	if err := router.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
