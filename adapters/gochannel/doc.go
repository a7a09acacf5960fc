// Package gochannel is surely's adapter for Watermill's GoChannel, the
// in-process Pub/Sub: a constructor with the defaults surely wants.
//
// GoChannel is for tests, examples and single-process tools, never for
// production data. Messages live in the process's memory only: a crash, a
// kill or a restart loses every message not yet acked (and, with the
// persistent default, the whole history with it). There is no broker to
// redeliver them, so surely's crash guarantees do not hold on GoChannel.
//
// # Defaults, and why
//
//   - Persistent: a message published before anything subscribed to its
//     topic is kept and handed to the next subscriber, instead of being
//     dropped (Watermill's default drops it, with an Info log line). The
//     price: every message stays in memory for the life of the GoChannel,
//     and a new subscriber of a topic gets its whole history again
//     (surely's dedup store turns those into duplicates, acked without
//     running, while the store still holds their records).
//   - No BlockPublishUntilSubscriberAck: a handler that publishes to a
//     topic it consumes cannot deadlock.
//   - No PreserveContext: the handler's context derives from the
//     subscriber's, not from the publisher's, so a publisher's cancelled
//     request does not cancel the handler.
//
// # What surely gets from it
//
// No delivery.Info and no delivery.Control:
//
//   - no delivery count: delivery.InfoFrom finds nothing;
//   - a nack is an immediate in-process resend to the same subscriber.
//     surely's chain waits before it returns an error (the retry backoff,
//     an operation in progress elsewhere), so it does not spin; a bare
//     handler that keeps failing does (Watermill's Retry measured 28,606
//     runs in 0.5s);
//   - no lease: a message is never redelivered while its handler runs, so
//     nothing needs extending;
//   - no consumer groups: every subscriber of a topic gets every message
//     (fan-out). Two routers on one topic process each message once only
//     thanks to the dedup store; they do not share the work.
//
// Messages travel as Go values (copies), never as bytes, so none can
// arrive undecodable.
//
// The conformance suite (adapters/adaptertest) runs on it with
// NoCrashRecovery, NoConsumerGroups and NoMalformed.
package gochannel
