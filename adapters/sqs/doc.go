// Package sqs is surely's adapter for Amazon SQS: watermill-aws' Subscriber
// and Publisher (github.com/ThreeDotsLabs/watermill-aws/sqs), configured for
// at-least-once delivery, with the delivery facts surely's middleware uses.
//
//	cfg, err := config.LoadDefaultConfig(ctx) // region and credentials
//	pub, err := sqs.NewPublisher(cfg, delivery.WithLogger(logger))
//	sub, err := sqs.NewSubscriber(cfg, delivery.WithLogger(logger))
//	h, err := handler.New(charge, handler.WithStore(store, "billing"), ...)
//	router.AddConsumerHandler("billing", "orders", sub, handler.NoPublish(h))
//
// Both constructors take the aws.Config and, as delivery.Option values,
// their settings (this package's WithClientOptions, WithWaitTime,
// WithMarshaler; delivery's WithAckWait, WithConcurrency, WithLogger and
// WithCloseTimeout); an option a constructor does not use is refused, not
// ignored. An endpoint of your own (LocalStack, a test emulator) is a
// client option:
//
//	sub, err := sqs.NewSubscriber(cfg, sqs.WithClientOptions(func(o *awssqs.Options) { o.BaseEndpoint = &url }))
//
// A topic is a queue name. A queue is one group of competing consumers:
// every Subscriber of a queue shares its messages, in every process (for
// fan-out, put an SNS topic in front of several queues).
//
// # Queues
//
// The Subscriber creates a missing queue once (SubscribeInitialize, also
// called by Subscribe), with its visibility timeout; an existing queue is
// used as it is. The Publisher never creates queues: publishing to a
// missing queue fails rather than creating a queue nobody reads. Both
// resolve a queue's URL once (GetQueueUrl) and cache it, so a publish is
// one SendMessage.
//
// # Subscriber defaults, and why
//
//   - Ack after the handler: the Subscriber deletes a message only once it
//     was acked, which the router does after surely's chain returned nil.
//     A message neither acked nor nacked (the process died) comes back
//     after its visibility timeout.
//   - One message per ReceiveMessage: watermill-aws stops handing out a
//     received batch at the first nack, and the rest of it then waits out
//     its visibility timeout; with one message per receive
//     nothing waits, and no message sits in the client while its
//     visibility timeout runs. delivery.WithConcurrency (default 1) runs
//     that many receivers (watermill-aws' ConsumeWorkers) per Subscribe,
//     each receiving one message and waiting for its ack or nack.
//   - Long polling, 20s (WithWaitTime): an idle queue costs one request per
//     20s per receiver, and a message is handed out as soon as it arrives.
//   - A visibility timeout of 30s (delivery.WithAckWait: whole seconds
//     from 1s to 12h), asked for with every receive, so the queue's own
//     setting does not matter; it is set on the queues the Subscriber
//     creates, and delivery.Control.Extend resets the visibility to it.
//     surely's dedup step extends it (every lease/3, 10s by default) while
//     the handler runs, so it bounds crash recovery, not the handler.
//   - ApproximateReceiveCount is asked for with every receive.
//
// # Delivery facts in the message context
//
// watermill-aws replaces a message's context after its Unmarshaler ran, so
// the Subscriber's Unmarshaler records each message's facts and the
// Subscriber puts them into msg.Context() as it hands the message out:
//
//   - delivery.Info{Count: ApproximateReceiveCount, Redelivered: Count > 1}
//     (no Info when SQS sent no count);
//   - a delivery.Control: NackAfter(d) makes the nack that follows a
//     ChangeMessageVisibility to d (rounded up to whole seconds, at most
//     12h; SQS holds the message back, not the handler); a plain nack
//     sets the visibility to 0, so the message is received again at once
//     (watermill-aws itself does nothing on a nack). Extend(ctx) sets the
//     visibility back to the visibility timeout (ChangeMessageVisibility), so
//     that the broker's lease follows the store's; it fails after the ack
//     or nack.
//
// # Malformed messages
//
// A message the Unmarshaler cannot decode (an error, a panic, no message)
// never stops the subscription nor loops (watermill-aws would log it and
// leave it to come back after every visibility timeout): it is handed out
// as a message whose metadata has only delivery.KeyDecodeError (the error)
// and "surely_decode_headers" (the raw message attributes as JSON),
// whose payload is the raw SQS body, and whose UUID is the _watermill_message_uuid
// attribute or else the SQS message ID. surely's chain dead-letters it with
// reason "decode" and acks it after the dead letter was published.
//
// With the default marshaler the attributes are checked first, because
// watermill-aws' DefaultMarshalerUnmarshaler would drop some of them
// silently or crash: an attribute without a data type or value, a custom
// data type ("String.json"), or a _watermill_message_uuid that is not a
// String makes the message undecodable. A marshaler given with
// WithMarshaler gets the attributes unchecked.
//
// # Clients and shutdown
//
// NewSubscriber and NewPublisher make their own SQS clients from the
// aws.Config given; they close nothing of the caller's. Subscriber.Close
// drains, like the other adapters': it stops receiving (a long poll in
// flight is cancelled) and handing out messages (one the Subscriber
// received but did not hand out is made visible again at once; one that
// watermill-aws was still receiving when Close began, or that it dropped
// while closing, is never seen by the Subscriber and comes back after its
// visibility timeout: nothing is lost), waits up to the close timeout
// (delivery.WithCloseTimeout, default 30s) for the messages in flight to
// be acked (and deleted) or nacked, and only then cancels the contexts of handlers still running; their messages come back
// after their visibility timeout. The handlers' contexts therefore derive
// from the context given to Subscribe (the router's), not from
// watermill-aws', which it cancels as soon as it is closed, and the
// Subscriber deletes acked messages itself. Closing the subscriber before
// the router lets in-flight handlers finish and ack; the router closes it
// again, harmlessly.
package sqs
