// Package amqp is surely's adapter for RabbitMQ (AMQP 0-9-1): a Watermill
// Subscriber and Publisher with safe defaults for at-least-once delivery,
// and the delivery facts surely's middleware uses.
//
// Both sides use watermill-amqp's (v3) Marshaler interface (default: its
// DefaultMarshaler, metadata as headers), so the wire format is
// watermill-amqp's, but both talk to the broker with amqp091-go directly.
// The Publisher does, because watermill-amqp's publisher cannot see a
// returned message (it registers no basic.return listener), so a mandatory
// publish to a deleted queue would still be confirmed and lost. The
// Subscriber does, because watermill-amqp's subscriber is not safe as it
// is: a message its Unmarshaler rejects (a quorum queue's integer
// x-delivery-count header is enough) is nacked below the router and
// requeued at once, forever; it handles one message at a time per
// subscription whatever the prefetch; it nacks the messages in flight as
// soon as it is closed, while their handlers still run; and it replaces the
// message context after unmarshaling, so nothing can ride along in it.
//
//	pub, err := amqp.NewPublisher(url, delivery.WithLogger(logger))
//	sub, err := amqp.NewSubscriber(url, delivery.WithConcurrency(4), delivery.WithLogger(logger))
//	h, err := handler.New(charge, handler.WithStore(store, "billing"), handler.WithDeadLetter(pub, "billing.dead"), ...)
//	router.AddConsumerHandler("billing", "orders", sub, handler.NoPublish(h))
//
// # Topology
//
// A Watermill topic is a queue name: the Publisher publishes to the default
// exchange with the topic as routing key, and the Subscriber consumes the
// queue of that name. Every Subscriber of a topic competes for its messages
// (one consumer group per queue); to give several groups every message,
// use one topic per group. Queue names have 1 to 255 bytes and must not
// start with "amq.".
//
// # Defaults, and why
//
//   - Durable quorum queues (QueueArguments: x-queue-type quorum), declared
//     by the Subscriber, and by the Publisher before its first message to
//     a topic when the queue is missing. A quorum queue is replicated, confirms a publish once a
//     majority has it, and counts deliveries.
//   - Mandatory publishing: RabbitMQ confirms a message that no queue takes,
//     and drops it, so a queue deleted after the Publisher declared it (by
//     an operator, or by an x-expires of its own) would swallow every later
//     message, a dead letter included, while its source is acked. The
//     Publisher publishes every message with the mandatory flag; the broker
//     returns an unroutable one (basic.return, which it sends before the
//     message's confirm on the same channel, and one message at a time is in
//     flight on a channel), and Publish fails with ErrUnroutable. The next
//     Publish to the topic declares the queue again.
//   - x-delivery-limit 2^31-1: the broker never drops a
//     message after N deliveries (RabbitMQ 4.0's release notes give quorum
//     queues a default limit of 20; on RabbitMQ 3, -1 dropped a message at
//     its first nack, measured); surely's durable attempt budget and dead
//     letter decide.
//   - Manual acks, sent only when the router acked the message, i.e. after
//     surely's chain returned nil; a nack requeues the message.
//   - Prefetch (basic.qos) = delivery.WithConcurrency (default 1), on a channel
//     of its own per topic: the broker hands this process no more messages
//     than it works on, so the others stay available to other consumers,
//     and up to Concurrency messages are handled at once.
//   - Publisher confirms on every publishing channel, and a pool of
//     WithChannels channels (default 8), each opened on first
//     use and again after it was lost: Publish returns only
//     after the broker confirmed, and a broker nack (a full queue that
//     rejects publishes, for instance) is an error.
//   - Persistent delivery mode (2): a durable queue's messages survive a
//     broker restart. A marshaler that turns it off is refused.
//
// Classic queues are not used because they give surely less and risk
// more: they have no delivery count (a redelivery carries only the
// redelivered flag, so Info.Count would be 0 on every redelivery), and they
// are not replicated (mirroring is deprecated, and gone in RabbitMQ 4), so
// the loss of one node's disk loses their messages, confirmed or not.
//
// A queue that exists with other arguments than QueueArguments (a classic
// or transient queue, a quorum queue without x-delivery-limit, or one with
// an argument of its own) is never changed. The Subscriber does not
// consume it: Subscribe and SubscribeInitialize return ErrQueueMismatch
// with the broker's PRECONDITION_FAILED, which names the first argument
// that differs (RabbitMQ 3.10.8 refuses a declaration that lacks an
// argument the queue has, measured). The Publisher publishes to it as it
// is: it only checks that the queue exists (a passive declaration, which
// in AMQP 0-9-1 returns no arguments) and declares it with QueueArguments
// when it is missing, as the Publisher of earlier versions did. Refusing
// there would make every message a handler produces to such a queue (a
// dead-letter queue with a dead-letter exchange of its own, say) fail
// after its source's work was done, and the source be redelivered and
// re-emit it without end.
//
// So a queue's arguments and policies are the operator's responsibility.
// Some drop messages the broker confirmed, which the Publisher cannot see
// and the Subscriber's refusal catches only as arguments, never as
// policies: x-max-length or x-max-length-bytes with the default overflow
// (drop-head), x-message-ttl, x-expires (the queue itself goes), a
// transient queue (gone at a broker restart), and operator policies
// (max-length, message-ttl, expires), which apply to a queue without any
// client seeing them. Keep them off the queues surely publishes to and
// consumes. Mandatory publishing still catches a queue that vanished (an
// expired or deleted one): Publish fails with ErrUnroutable.
//
// # Delivery facts in the message context
//
// Every message the Subscriber hands out carries, in msg.Context():
//
//   - delivery.Info{Count, Redelivered}. Redelivered is the AMQP
//     redelivered flag. A quorum queue adds x-delivery-count to a
//     redelivery: the number of earlier deliveries (absent on the first
//     delivery, 1 on the second; measured on RabbitMQ 3.10.8, counting
//     nacks, rejects and deliveries whose channel closed or whose process
//     died). So Count is 1 on a delivery without the redelivered flag,
//     x-delivery-count+1 on a redelivery that has it, and 0 (unknown) on a
//     redelivery that has not (a classic queue). A quorum queue passes a
//     publisher's own x-delivery-count through on the first delivery
//     (measured), so the header is trusted only with the redelivered flag,
//     and it is removed from the message's metadata: surely never
//     publishes it again (a dead letter, a replay). Other RabbitMQ
//     versions may count some returns differently; the store's durable
//     attempt count stays surely's authority.
//   - a delivery.Control that is honest about core AMQP: NackAfter reports
//     false, because a nack requeues at once and there is no per-message
//     redelivery delay (surely's retry step then waits before it nacks,
//     which also paces the consumer); Extend does nothing and returns nil,
//     because an unacked delivery stays with its consumer for as long as
//     the channel lives: there is no ack deadline to push back, except
//     RabbitMQ's consumer_timeout (30 minutes by default), after which the
//     broker closes the channel and requeues the message (the Subscriber
//     reopens it). A handler that may run longer needs a larger
//     consumer_timeout on the broker.
//
// The router adds its own values (handler name, topic) on top; they all
// survive. The message context derives from the context given to Subscribe
// (the router's), and is cancelled once the message is settled.
//
// # Headers and malformed messages
//
// Watermill metadata is strings only. The default marshaler (watermill-amqp's
// DefaultMarshaler) converts header values that other clients set as numbers or
// booleans to their text ("5", "true") in its PreprocessDelivery. A message whose headers still cannot be
// decoded (a table, an array, a timestamp, a decimal, a byte array; a UUID
// header that is not a string), or that makes the Marshaler fail, panic or
// return nothing, never stops the subscription nor loops: it is handed out as a
// message whose metadata has only delivery.KeyDecodeError (the error) and
// "surely_decode_headers" (the raw headers as JSON, without
// x-delivery-count), whose payload is the raw body, and whose UUID is the
// Watermill UUID header, else the AMQP message-id, else a hash of headers and
// body. surely's chain dead-letters it with reason "decode" before looking for
// an operation key, and acks it after the dead letter was published.
//
// # Connections
//
// NewSubscriber and NewPublisher dial the URL themselves (with WithAMQPConfig's
// configuration) and own that connection: they reconnect when it is lost (the
// Publisher at its next Publish), and Close closes it. Neither takes a caller's
// connection: one connection to consume and another to publish is also
// RabbitMQ's advice, since a publisher blocked by a resource alarm must not
// hold up the acks of consumers on the same connection.
//
// # Failures and shutdown
//
// When the Subscriber's channel or connection is lost, the broker requeues
// every unacked message (their acks, sent later on the dead channel, fail
// and are logged), and the subscription opens a new channel, on a new
// connection if needed, retrying with backoff (100ms to 5s). An ack is not
// confirmed by the broker: one lost with its connection means one more
// delivery, which surely's dedup turns into a no-op.
//
// Subscriber.Close stops handing out messages (those the broker prefetched but
// were not handed out are requeued at once), waits up to the close timeout
// (delivery.WithCloseTimeout, default 30s) for those in flight to be acked or
// nacked, then closes the channels and the connection; anything still unacked
// goes back to the queue. Closing the subscriber before the router lets
// in-flight handlers finish and ack; the router closes it again, harmlessly.
package amqp
