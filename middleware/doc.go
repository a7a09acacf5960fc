// Package middleware holds each step of surely's chain as a plain Watermill
// message.HandlerMiddleware, usable on its own in any router. Most users
// want package handler, which assembles them in the only safe order:
//
//	Trace → Observe → DeadLetter → Retry → Identity → Dedup → your handler
//
// # Steps
//
//   - Trace (optional) starts one "process <topic>" span per attempt,
//     following the OpenTelemetry messaging conventions, linked to the
//     message's creation context, to the previous attempt (across
//     processes, through the store's attempt ledger) and, for a replayed
//     dead letter, to its dead-letter span. Publishing a dead letter gets
//     a span of its own.
//   - Observe installs the per-delivery outcome report (unless Trace did),
//     logs the outcome with the message context, records metrics
//     (WithMeterProvider) and calls an OnOutcome callback. A
//     dead-lettered message is acked (the chain returns nil), yet reported as
//     dead_lettered, never as processed.
//   - DeadLetter publishes final failures (a *dlq.FinalError or an error
//     marked retry.Permanent) and acks only after that publish succeeded.
//   - Retry runs in-process attempts with backoff and equal jitter, nacks
//     after a delay when they are spent, and consults the outage breaker.
//   - Identity extracts the operation key and payload fingerprint.
//   - Dedup claims, completes or releases the operation in an
//     idempotency.Store, extends the lease while the handler runs, and
//     re-emits the stored produced messages of a duplicate. Each claim
//     names this process ("host/pid", read once) as its owner, which the
//     store keeps in the attempt's history entry.
//
// # Leases and store calls
//
// Every store call of Dedup has a deadline: WithStoreTimeout, by default
// 5s or a third of the lease when that is shorter
// (database/sql has no timeout of its own). A Complete that fails is
// retried a few times with the same lease; a store answers a Complete
// re-sent after it was applied with success (see idempotency.Store), so a
// lost reply still ends processed and the produced messages go out at once.
// Extensions never hold up the handler's Complete: a hung Extend does not
// delay it. An extension refused by fencing cancels the handler's context
// at once with cause idempotency.ErrLeaseLost; the attempt ends lease_lost
// (nacked, neither completed, released nor dead-lettered).
//
// # Delayed nacks
//
// Watermill has no portable nack-with-delay. When surely wants one
// (operation in progress elsewhere, breaker open, transient failure after
// the in-process attempts, failing dead-letter publish) it asks the broker
// through a delivery.Control when the adapter provides one, and otherwise
// waits before returning the error. That paces the consumer instead of
// spinning. A wait here is bounded (MaxInProcessTime; 5s for an operation
// in progress elsewhere);
// a retry.After delay longer than that is kept by the store instead
// (Dedup records it on Release), so the early redelivery finds the
// operation InProgress and is nacked again, uncharged. The wait of an
// InProgress nack is the one the store measured on its own clock
// (idempotency.ClaimResult.Wait), never an expiry read against this
// process's clock.
//
// # Types named in package delivery
//
// The outcome of a delivery and the missing-key policies are package
// delivery's: Observe's WithOnOutcome takes a
// func(context.Context, delivery.OutcomeParams) delivery.OutcomeResult, and
// Identity a delivery.MissingKeyPolicy (delivery.RejectMissingKey or
// delivery.ProcessWithoutDedup). Package handler names the same types and
// values (handler.Outcome is delivery.Outcome), for its users.
//
// # Telemetry names
//
// Every name surely's chain gives its telemetry, a constant each: the
// instrumentation scope, the metrics (WithMeterProvider) and their
// attributes, the span attributes (Trace; the last two on a replay's
// publish span, dlq/replay) and the values of AttrLink. The archive's
// gauges are in dlq/archive.
//
//	github.com/surely-dev/surely        ScopeName: the tracer's and the meter's scope
//	surely.messages.processed           MetricProcessed: counter, handler ran and committed
//	surely.messages.duplicates          MetricDuplicates: counter, operation already done
//	surely.messages.in_progress         MetricInProgress: counter, leased by another owner
//	surely.messages.conflicts           MetricConflicts: counter, key seen with another payload
//	surely.lease.takeovers              MetricLeaseTakeovers: counter, claims that took over an expired lease
//	surely.lease.lost                   MetricLeaseLost: counter, attempts refused by fencing
//	surely.retries                      MetricRetries: counter, transient failures retried
//	surely.dead_letters                 MetricDeadLetters: counter, dead letters published
//	surely.dead_letter.publish_failures MetricDeadLetterFailures: counter, dead-letter publishes that failed
//	surely.handler.duration             MetricHandlerDuration: histogram, seconds in the chain
//	surely.end_to_end.latency           MetricEndToEndLatency: histogram, seconds since the first publish
//	topic                               AttrTopic: metric attribute, the topic consumed
//	handler                             AttrHandler: metric attribute, the Watermill handler
//	outcome                             AttrMetricOutcome: metric attribute, the delivery.Outcome
//	reason                              AttrReason: metric attribute, the dlq.Reason of a dead letter
//	surely.operation_key                AttrOperationKey: span attribute, the operation key
//	surely.attempt                      AttrAttempt: span attribute, the durable attempt number
//	surely.delivery_count               AttrDeliveryCount: span attribute, the broker's delivery count
//	surely.outcome                      AttrOutcome: span attribute, the delivery.Outcome
//	surely.previous                     AttrPrevious: span and link attribute, how the previous attempt ended
//	surely.dead_letter.reason           AttrDeadLetterReason: span attribute, the dlq.Reason
//	surely.link                         AttrLink: link attribute, what the link points to
//	surely.replay_id                    AttrReplayID: replay span attribute, the run
//	surely.replay_of                    AttrReplayOf: replay span attribute, the archived entry
//	creation                            LinkCreation: AttrLink value, the producer's span
//	previous_attempt                    LinkPreviousAttempt: AttrLink value, the previous attempt's span
//	dead_letter                         LinkDeadLetter: AttrLink value, the dead-letter span a replay links to
//
// # Context
//
// Every step that changes the message context restores it before it
// returns, so steps outside see the context they passed in.
package middleware
