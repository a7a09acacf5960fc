// Package redisstream is surely's adapter for Redis Streams consumer
// groups: a Watermill Subscriber and Publisher on watermill-redisstream,
// with safe defaults for at-least-once delivery and the delivery facts
// surely's middleware uses.
//
//	opts := &redis.UniversalOptions{Addrs: []string{"localhost:6379"}}
//	pub, err := redisstream.NewPublisher(opts, delivery.WithLogger(logger))
//	sub, err := redisstream.NewSubscriber(opts, "billing", delivery.WithLogger(logger))
//	store, err := redisstore.New(ctx, redis.NewUniversalClient(opts)) // a client of its own
//	h, err := handler.New(charge, handler.WithStore(store, "billing"), ...)
//	router.AddConsumerHandler("billing", "orders", sub, handler.NoPublish(h))
//
// # Clients
//
// NewSubscriber and NewPublisher take redis.UniversalOptions and make a
// client of their own, which Close closes. They never take a client:
// watermill-redisstream closes the client it is given, so a client shared
// with an idempotency store (or another subscriber) would be closed under
// it.
//
// # Subscriber defaults, and why
//
//   - Consumer group (NewSubscriber's group argument), created at the
//     start of the stream ("0") when missing: a group created after
//     messages were published still gets them. Every Subscriber of the
//     group shares the entries; each is one consumer (WithConsumer,
//     default host name and a random suffix).
//   - Ack wait (delivery.WithAckWait, at least 100ms;
//     watermill-redisstream's MaxIdleTime) 30s: an entry delivered to a
//     consumer that neither acks nor extends it for that long (a crashed
//     or hung consumer) is claimed by another consumer of the group. surely's dedup step extends it while the
//     handler runs (every lease/3: 10s by default), so it bounds crash
//     recovery, not the handler. The claim interval (WithClaimInterval,
//     default a quarter of the ack wait) is how often consumers look for
//     such entries.
//   - Resend interval (delivery.WithResendInterval, watermill-redisstream's
//     NackResendSleep) 100ms: watermill-redisstream resends a nacked
//     message in process, in a tight loop unless told to wait.
//   - The initial XREADGROUP blocks for 100ms, not forever, so Close does
//     not leave a reader behind.
//   - One entry at a time per Subscribe (watermill-redisstream's model):
//     run more consumers for more throughput.
//
// # Delivery facts in the message context
//
// Every message carries, in msg.Context():
//
//   - delivery.Info{Count, Redelivered}: Count is the entry's delivery
//     counter in the group's pending entries list (1 for a new entry; a
//     claim by another consumer adds one), and the subscriber adds one for
//     each in-process resend after a nack, so it counts every delivery to a
//     handler, across consumers. Redelivered is Count > 1, or the entry was
//     claimed.
//   - a delivery.Control: Extend(ctx) resets the entry's idle time
//     (XCLAIM to this consumer with JUSTID, in a script that first checks
//     that this consumer still owns the entry: it never takes an entry
//     back from a consumer that claimed it, and fails when one did);
//     NackAfter(d) delays the nacked message's next delivery by d at
//     least (see Postponed messages).
//
// # Postponed messages
//
// watermill-redisstream resends a nacked message in process, and hands out
// nothing else of the subscription until it is acked. So a NackAfter delay up
// to 1s is held: the subscriber waits d (instead of the resend
// interval), keeping the entry claimed, then resends it, and the subscription
// waits with it, as with any wait in a handler. A longer delay (a
// retry.After(d) that does not fit in the policy's MaxInProcessTime, a
// breaker's pause, the wait for a lease held elsewhere) is not held, since it
// would stop every other entry of the subscription for d, on each attempt:
// the entry is postponed. It stays in the group's pending entries list,
// unacked, its idle time restarted; the subscription goes on with the next
// entry after the resend interval; and a consumer of the group (this one
// included) claims the entry once it was idle for the ack wait, a new
// delivery (Count + 1). A claim before a retry.After's d (d > the ack wait)
// is answered by surely's dedup store, which keeps the failure's not-before
// time, with an InProgress that spends no attempt and is postponed in turn (a
// plain backoff delay is no promise, and is cut to the ack wait). So a
// postponed message comes back between d and about d + ack wait + claim
// interval after its nack, and "not before d" rests on the dedup store for a
// d beyond the ack wait. The subscriber drops watermill-redisstream's own
// XACK of a postponed entry (in its go-redis hook), which is how the entry
// stays pending while watermill-redisstream moves on. The resend interval
// paces postponements: an open breaker pauses every message, and would
// otherwise sweep the whole stream into the pending list at full speed.
//
// watermill-redisstream gives its Unmarshaler only the entry's fields, and
// drops the message context when it resends a nacked message. The adapter
// learns each entry's ID through a go-redis hook on its own client (it
// tags the entries XREADGROUP and XCLAIM return), and hands out a fresh
// message for every delivery, whose context carries the facts.
//
// # Acks
//
// An ack is XACKed by the subscriber itself, tried three times and logged
// when it fails (the entry then stays pending and is claimed again later:
// a duplicate, which the dedup store absorbs); watermill-redisstream
// XACKs it once more, harmlessly. An ack of an entry that another
// consumer claimed in the meantime removes it from the pending list too:
// the work is done and committed, so nothing is lost.
//
// # Malformed entries
//
// watermill-redisstream ends the subscription, silently, when its Unmarshaler
// fails. Here an Unmarshaler error, panic or missing message never does: the
// entry is handed out as a message whose metadata has only
// delivery.KeyDecodeError (the error), "surely_decode_entry_id" (the
// stream entry ID) and "surely_decode_fields" (the other fields, as a JSON
// object: field name to its value, a JSON string when the value is valid
// UTF-8, else {"base64": "<standard base64>"}), whose payload is the raw "payload" field, and
// whose UUID is the entry's Watermill UUID field or else "redis-<entry ID>".
// surely's chain dead-letters it with reason "decode" and acks it after the
// dead letter was published.
//
// # Publisher
//
// watermill-redisstream's Publisher (XADD, one entry per message), with a
// client of its own. It never trims streams: a trimmed entry is lost even
// when a group has not consumed it yet.
//
// # Shutdown
//
// Subscriber.Close stops handing out messages, waits up to the close timeout
// (delivery.WithCloseTimeout, default 30s) for those in flight to be acked or
// nacked (a graceful drain: their contexts stay live meanwhile), then stops
// watermill-redisstream and closes the client. Entries still unacked stay
// pending and are claimed by another consumer after the ack wait. Closing the
// subscriber before the router lets in-flight handlers finish and ack.
package redisstream
