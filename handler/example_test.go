package handler_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/retry"
)

// A payment consumer: a duplicate delivery is acked without charging twice,
// a declined card goes to the dead letter with its reason.
func ExampleNew() {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = pubSub.Close() }()
	store, _ := memstore.New() // tests and examples only: use redisstore or sqlstore

	charged := make(chan string, 10)
	charge := func(msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "declined" {
			return nil, retry.Permanent(errors.New("card declined"))
		}
		// Pass the operation key on to the payment provider as its idempotency key.
		charged <- idempotency.KeyFrom(msg.Context())
		return nil, nil
	}
	h, err := handler.New(charge,
		handler.WithStore(store, "charge-payments"),
		handler.WithDeadLetter(pubSub, "payments.dead"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}

	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddConsumerHandler("charge-payments", "payments", pubSub, handler.NoPublish(h))
	dead, _ := pubSub.Subscribe(context.Background(), "payments.dead")
	go func() { _ = router.Run(context.Background()) }()
	defer func() { _ = router.Close() }()
	<-router.Running()

	for _, p := range []struct{ key, body string }{{"pay-1", "10 EUR"}, {"pay-1", "10 EUR"}, {"pay-2", "declined"}} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(p.body))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, p.key)
		_ = pubSub.Publish("payments", msg)
	}

	fmt.Println("charged:", <-charged)
	d := <-dead
	fmt.Println("dead letter:", d.Metadata.Get(dlq.KeyOperationKey), d.Metadata.Get(dlq.KeyReason), d.Metadata.Get(dlq.KeyError))
	d.Ack()
	select {
	case k := <-charged:
		fmt.Println("charged twice:", k)
	case <-time.After(100 * time.Millisecond):
		fmt.Println("the duplicate was not charged")
	}
	// Output:
	// charged: pay-1
	// dead letter: pay-2 permanent card declined
	// the duplicate was not charged
}
