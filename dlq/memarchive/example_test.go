package memarchive_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/retry"
)

// The archive is the handler's dead-letter publisher: a declined payment
// lands in it, and an operator lists it by topic and reason.
func Example() {
	ctx := context.Background()
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = pubSub.Close() }()
	store, _ := memstore.New()  // tests and examples only
	arch, _ := memarchive.New() // tests and examples only: use redisarchive or sqlarchive
	settled := make(chan struct{}, 1)

	h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
		return nil, retry.Permanent(errors.New("card declined"))
	},
		handler.WithStore(store, "charge"),
		handler.WithDeadLetter(arch, "dead"), // the topic is ignored
		handler.WithOnOutcome(func(context.Context, handler.OutcomeParams) handler.OutcomeResult {
			settled <- struct{}{} // after the dead letter was stored
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddConsumerHandler("charge", "payments", pubSub, handler.NoPublish(h))
	go func() { _ = router.Run(ctx) }()
	defer func() { _ = router.Close() }()
	<-router.Running()

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"amount":"10 EUR"}`))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, "pay-1")
	_ = pubSub.Publish("payments", msg)
	<-settled

	entries, _ := arch.List(ctx, archive.Filter{Topic: "payments", Reason: dlq.ReasonPermanent}, archive.Page{})
	e := entries[0]
	fmt.Println(e.OperationKey, e.Reason, e.Error, string(e.Message.Payload))
	// Output:
	// pay-1 permanent card declined {"amount":"10 EUR"}
}
