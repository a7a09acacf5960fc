package integration_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/adapters/sqs"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/sqsemu"
)

// A subscriber and a publisher on the in-process emulator (on Amazon SQS,
// give them the aws.Config of config.LoadDefaultConfig and no client options). The
// subscriber creates its queue; the handler finds the delivery count in the
// message context.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := sqs.NewSubscriber(sqsemu.AWSConfig(), sqs.WithClientOptions(emu.ClientOptions()...), sqs.WithWaitTime(time.Second))
	if err != nil {
		panic(err)
	}
	defer func() { _ = sub.Close() }()
	pub, err := sqs.NewPublisher(sqsemu.AWSConfig(), sqs.WithClientOptions(emu.ClientOptions()...))
	if err != nil {
		panic(err)
	}
	defer func() { _ = pub.Close() }()

	msgs, err := sub.Subscribe(ctx, "surely_example_orders")
	if err != nil {
		panic(err)
	}
	if err := pub.Publish("surely_example_orders", message.NewMessage("order-1", []byte("charge 42"))); err != nil {
		panic(err)
	}
	msg := <-msgs
	info, _ := delivery.InfoFrom(msg.Context())
	fmt.Printf("%s %q, delivery %d\n", msg.UUID, msg.Payload, info.Count)
	msg.Ack()
	// Output: order-1 "charge 42", delivery 1
}
