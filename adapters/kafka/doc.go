// Package kafka is surely's adapter for Apache Kafka: a Watermill
// Subscriber and Publisher with safe defaults for at-least-once delivery,
// built on watermill-kafka (v3, Sarama).
//
//	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
//	err = kafka.EnsureTopic(admin, "orders", sarama.TopicDetail{NumPartitions: 12, ReplicationFactor: 3,
//		ConfigEntries: map[string]*string{"min.insync.replicas": &two}})
//	pub, err := kafka.NewPublisher(brokers, delivery.WithLogger(logger))
//	sub, err := kafka.NewSubscriber(brokers, "billing", delivery.WithLogger(logger))
//	h, err := handler.New(charge, handler.WithStore(store, "billing"), handler.WithDeadLetter(pub, "billing.dead"), ...)
//	router.AddConsumerHandler("billing", "orders", sub, handler.NoPublish(h))
//
// Both sides are watermill-kafka's, configured here, and use its wire
// format (the UUID and every metadata entry as record headers,
// the payload as the record value). Both constructors take their optional
// settings as delivery.Option values, this package's (WithMarshaler,
// WithSaramaConfig) and delivery's (WithLogger, WithCloseTimeout), and
// refuse one they do not use. The Subscriber wraps
// watermill-kafka's to change two things: a record its Unmarshaler cannot decode no longer
// stops the partition (watermill-kafka returns the error from the group
// handler, Sarama ends the session, and the next session reads the same
// record again: the partition is stuck for good), and Close no longer
// drops the messages in flight (see Shutdown).
//
// # Topics
//
// Nothing creates a topic implicitly: Metadata.AllowAutoTopicCreation is
// off on both sides, so a publish to a misspelled topic fails instead of
// creating it with the broker's defaults (often a single replica), and
// Subscribe fails with ErrNoTopic instead of retrying forever. EnsureTopic
// creates a topic once, at start, and never changes an existing one.
//
// # Subscriber defaults, and why
//
//   - A consumer group (an argument of NewSubscriber, required). Without one,
//     watermill-kafka reads every partition from the initial offset and
//     commits nothing: every restart replays or skips.
//   - Offsets.Initial oldest: a group that has no committed offset yet (a
//     new group, or one whose offsets expired) starts at the oldest message
//     the topic keeps, not after the newest (Sarama's default), which
//     would skip every message published before it first joined.
//   - An offset is marked only when the router acked the message, that is
//     after surely's chain returned nil (watermill-kafka calls MarkMessage
//     on the ack). A partition's messages are handed out one at a time, in
//     offset order, the next one only after the previous was acked, so a
//     marked offset never passes an unacked message. A nack hands the same
//     message out again 100ms later, to the same consumer.
//   - Marked offsets are committed every second (AutoCommit) and when the
//     consumer leaves the group (Close, a rebalance). A crash therefore
//     delivers again at most the last second of acked messages; surely's
//     dedup acks them without running them. For a commit after every ack
//     instead, set Consumer.Offsets.AutoCommit.Enable false in WithSaramaConfig
//     (watermill-kafka then commits synchronously, one round trip per
//     message).
//   - Sarama's group timings are Kafka's (session 10s, heartbeat 3s,
//     rebalance 60s): a consumer that dies hands its partitions to the rest
//     of the group after the session timeout.
//
// A handler that runs long keeps its partition (Sarama heartbeats in the
// background): Kafka has no per-message deadline. A rebalance (a consumer
// joins or leaves) waits for the handlers in flight to return, and
// watermill-kafka does not mark an offset acked after the rebalance began:
// that message is delivered once more, to whichever consumer gets the
// partition, and surely's dedup acks it without running it (measured in
// the suite's slow-handler test: 2 deliveries, 1 run). A consumer not back
// within the rebalance timeout is dropped from the group; its messages in
// flight then go to another consumer while their handlers still run, and
// surely's dedup holds the second delivery back (the lease is still held).
//
// # Delivery facts in the message context
//
// Kafka reports no delivery count and watermill-kafka has no per-message
// nack delay nor deadline, so the Subscriber puts neither a delivery.Info
// nor a delivery.Control in the context: delivery.InfoFrom finds nothing,
// surely relies on its store's durable attempt count (which counts every
// claim, crashes included), its retry step waits itself before it nacks,
// and its dedup step extends only the store's lease. The context carries
// the record's partition, offset, timestamp and key (watermill-kafka's
// MessagePartitionFromCtx, MessagePartitionOffsetFromCtx,
// MessageTimestampFromCtx, MessageKeyFromCtx). It
// derives from the values of the context given to Subscribe (the
// router's) but is not cancelled with it; it is cancelled once the message
// is settled or given up.
//
// # Malformed records
//
// A record that the Unmarshaler cannot decode (an error, a panic, no
// message) is handed out as a message whose metadata has only
// delivery.KeyDecodeError (the error) and "surely_decode_headers" (the
// headers as JSON, a list of [key, value] pairs in record order),
// whose payload is the raw record value, and whose UUID is the record's
// Watermill UUID header, else "kafka-<topic>-<partition>-<offset>".
// surely's chain dead-letters it with reason "decode" before looking for
// an operation key, and acks it after the dead letter was published. The
// default marshaler refuses a header key that occurs twice, which
// watermill-kafka's DefaultMarshaler would silently collapse. A record
// without a UUID header (from another producer) is decoded, with
// "kafka-<topic>-<partition>-<offset>" as its UUID.
//
// # Publisher defaults
//
// A synchronous, idempotent Sarama producer: Publish returns once every
// in-sync replica has each message (RequiredAcks WaitForAll; with the
// topic's min.insync.replicas at 2, a message survives the loss of one
// broker), retries up to 10 times without duplicating or reordering
// (Idempotent, one request in flight per broker). NewPublisher refuses a
// Sarama configuration with weaker acks.
//
// # Connections and shutdown
//
// The Subscriber and the Publisher create their own Sarama clients
// (watermill-kafka creates one per subscription) and close them; they take
// none from the caller, and EnsureTopic never closes the ClusterAdmin it is
// given.
//
// Subscriber.Close stops handing out messages, waits up to the close
// timeout (delivery.WithCloseTimeout, default 30s) for those in flight to
// be acked or nacked, then leaves the group, committing the offsets of every acked message, and
// closes its clients; a message still unacked then is delivered again to
// the group (its handler's context is cancelled). Closing the subscriber
// before the router lets in-flight handlers finish and ack; the router
// closes it again, harmlessly. When the context given to Subscribe ends
// instead, the subscription drains the same way.
package kafka
