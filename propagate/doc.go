// Package propagate is the producer's half of surely's observability: a
// message.Publisher decorator that gives every message what the consumer's
// chain reads back.
//
//   - The operation key, in the idempotency_key metadata entry (the name is
//     configurable), when the message does not carry one yet. By default
//     the key is the message UUID, so a copy of a message re-published with
//     the same UUID gets the same key and is deduplicated.
//   - The W3C trace context (traceparent, tracestate) of the message
//     context, through an OpenTelemetry propagation.TextMapPropagator
//     (default propagation.TraceContext). The consumer's middleware.Trace
//     extracts it and links every attempt span to it.
//   - The time of the first publish (KeyPublishedAt), from which the
//     consumer's metrics measure end-to-end latency.
//
// # Retries keep the key
//
// Every entry is written only when it is missing. A producer that retries a
// failed publish must retry the same *message.Message (or a copy with its
// metadata): the retry then carries the key, the creation context and the
// publish time of the first try, and the consumer sees one operation. A
// producer that builds a new message for its retry gets a new UUID, hence a
// new key, and the consumer cannot tell the two apart: that is a second
// operation. Give such messages a business key (WithKey) instead.
//
// # Name
//
// The package propagates an operation's identity and trace context from
// the producer to the consumer; the consumer's side is middleware.Trace
// (and handler.WithTracerProvider), which extracts what this package
// injected.
package propagate
