// Command readme charges payments once each, whatever the broker redelivers.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/adapters/gochannel"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

func main() {
	// The broker: GoChannel, in process. A real one is an adapter's
	// publisher and subscriber: adapters/nats, amqp, kafka, sqs, sql, ...
	pubSub, err := gochannel.New()
	if err != nil {
		log.Fatal(err)
	}
	// The dedup store: in memory. A real one is idempotency/redisstore,
	// or idempotency/sqlstore (its Inbox commits your writes with the record).
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}

	charge := func(msg *message.Message) ([]*message.Message, error) {
		key := idempotency.KeyFrom(msg.Context()) // the operation: give it to the payment provider too
		if string(msg.Payload) == "declined" {
			return nil, handler.Permanent(errors.New("card declined")) // no retry: dead letter
		}
		fmt.Printf("charged %s: %s\n", key, msg.Payload)
		return nil, nil // any other error: retried, then dead-lettered
	}
	outcomes := make(chan handler.OutcomeParams, 10)
	h, err := handler.New(charge,
		handler.WithStore(store, "charge-payments"), // one namespace per handler
		handler.WithDeadLetter(pubSub, "payments.dead"),
		handler.WithOnOutcome(func(_ context.Context, o handler.OutcomeParams) handler.OutcomeResult {
			outcomes <- o // or handler.WithLogger, handler.WithMeterProvider
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		log.Fatal(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddConsumerHandler("charge-payments", "payments", pubSub, handler.NoPublish(h))
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()

	// The producer puts the operation key in the metadata (idempotency_key);
	// idempotency.NewExtractor reads it from elsewhere (CloudEvents id, UUID, payload).
	for _, p := range [][2]string{{"order-1", "10 EUR"}, {"order-1", "10 EUR"}, {"order-2", "declined"}} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(p[1]))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, p[0])
		if err := pubSub.Publish("payments", msg); err != nil {
			log.Fatal(err)
		}
		o := <-outcomes
		if o.Outcome == handler.OutcomeDeadLettered {
			fmt.Println(o.Key, o.Outcome, o.Reason+":", o.Cause)
			continue
		}
		fmt.Println(o.Key, o.Outcome)
	}
	if err := router.Close(); err != nil {
		log.Fatal(err)
	}
}
