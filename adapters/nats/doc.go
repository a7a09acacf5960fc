// Package nats is surely's adapter for NATS JetStream: a Watermill
// Subscriber and Publisher with safe defaults for at-least-once delivery,
// and the delivery facts surely's middleware uses.
//
// The Publisher is watermill-nats' (pkg/nats in JetStream mode), and both
// sides use its Marshaler (default NATSMarshaler: metadata as headers), so
// the wire format is watermill-nats'. The Subscriber consumes with nats.go's
// jetstream package directly, because neither watermill-nats subscriber is
// safe as it is: pkg/nats auto-acks by default when its callback returns (after its
// own ack timeout, on close, and for a message its Unmarshaler rejects:
// each of them lost), has no per-message nak delay, and closes its output
// channel while a callback may still send on it (a data race under -race,
// a "send on closed channel" panic when the timing is unlucky); pkg/jetstream
// has the same panic on shutdown, never uses its ConsumerConfig, prefetches
// 500 messages, and dereferences a nil message when its Unmarshaler fails.
//
//	if err := nats.EnsureStream(ctx, nc, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}}); err != nil { ... }
//	pub, err := nats.NewPublisher(url, delivery.WithLogger(logger))
//	sub, err := nats.NewSubscriber(url, "billing", delivery.WithLogger(logger))
//	h, err := handler.New(charge, handler.WithStore(store, "billing"), ...)
//	router.AddConsumerHandler("billing", "orders", sub, handler.NoPublish(h))
//
// # Streams
//
// Nothing creates a stream implicitly: EnsureStream creates it once, at
// start (zero values are the safe ones: file storage, limits retention, a
// 2-minute duplicate window), and never changes an existing stream. The
// publisher does not query or create streams per publish
// (watermill-nats' AutoProvision does), and Subscribe fails with
// ErrNoStream when no stream captures the topic.
//
// # Subscriber defaults, and why
//
// For each topic, Subscribe creates (or updates) one durable pull consumer,
// named ConsumerName(consumer, topic), before it consumes:
//
//   - Durable, created explicitly: an ephemeral or grouped consumer (what
//     watermill-nats creates) disappears with its subscription or after
//     inactivity, taking its unacked messages' state with it.
//   - DeliverPolicy all: a consumer created after messages were published
//     still gets them.
//   - AckPolicy explicit, acked only after the handler chain returned nil,
//     and with DoubleAck: the ack is confirmed by the server, or logged and
//     the message redelivered.
//   - MaxDeliver -1: the broker never drops a message after N deliveries;
//     surely's durable attempt budget and dead letter decide instead.
//   - AckWait from delivery.WithAckWait (default 30s, at least 100ms); surely's dedup step keeps it
//     from expiring while the handler runs (InProgress), so it need not exceed
//     the longest handler.
//   - MaxAckPending = delivery.WithConcurrency (default 1), and pulls of at most
//     that many messages: no message waits in the client while its ack
//     timer runs (a 500-message prefetch turns a slow handler into
//     duplicates). The price: a message nacked with a delay counts as
//     pending until it is redelivered, so with a concurrency of 1 it holds the
//     topic back for that delay (measured: a 2s NackAfter delayed the next
//     message by 2s). Raise the concurrency when one slow or backing-off
//     message must not hold the others.
//   - Every process with the same consumer (NewSubscriber's argument)
//     pulls from the same JetStream consumer: they share the messages.
//
// # Delivery facts in the message context
//
// Every message the Subscriber hands out carries, in msg.Context():
//
//   - delivery.Info{Count: NumDelivered, Redelivered: NumDelivered > 1}, the
//     server's count of deliveries of this message to this consumer;
//   - a delivery.Control: NackAfter(d) turns the nack that follows into
//     NakWithDelay(d) (the broker waits, not the handler); Extend(ctx)
//     sends InProgress, which restarts the server's AckWait (the server
//     does not confirm it).
//
// The router adds its own values (handler name, topic) on top; they all
// survive. The message context derives from the context given to Subscribe
// (the router's), and is cancelled once the message is settled.
//
// # Malformed messages
//
// A message the Marshaler cannot decode (an error, a panic, no message) never
// stops the subscription nor loops: it is handed out as a message whose
// metadata has only delivery.KeyDecodeError (the error) and
// "surely_decode_headers" (the raw headers as JSON, map[string][]string),
// whose payload is the raw NATS payload, and whose UUID is the Watermill UUID
// header or else "nats-<stream>-<seq>". surely's chain dead-letters it with
// reason "decode" before looking for an operation key, and acks it after the
// dead letter was published.
//
// # Connections
//
// NewSubscriber and NewPublisher connect to the URL themselves (nats.Connect
// with WithNATSOptions' options) and own that connection: Close closes it
// (the subscriber drains it first). They do not take a caller's connection
// because watermill-nats' publisher closes the connection it is given.
// EnsureStream uses the caller's *nats.Conn and never closes it.
//
// # Shutdown
//
// Subscriber.Close stops pulling and handing out messages (one pulled but not
// handed out yet is nacked at once), waits up to the close timeout
// (delivery.WithCloseTimeout, default 30s) for those in flight to be acked or
// nacked, then drains and closes the connection; anything still unacked is
// redelivered after AckWait. Closing the subscriber before the router lets
// in-flight handlers finish and ack; the router closes it again, harmlessly.
package nats
