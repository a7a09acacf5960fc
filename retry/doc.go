// Package retry is surely's retry policy: how a failed attempt is
// classified, how long to wait before the next one, how many attempts a
// message gets, and when to stop attempting at all because a dependency is
// down. It is pure policy: it imports nothing outside the standard library
// but surely's internal option and default packages, runs no goroutine
// and sleeps nowhere. The retry middleware applies it.
//
// # Classification
//
// A handler says what its error means by wrapping it, never by its text:
//
//   - [Permanent](err): retrying cannot help (a payload that does not
//     decode, a rule it breaks). The message is dead-lettered at once.
//   - [After](d, err): transient, and the next attempt must not come before
//     d (a Retry-After header, a rate limiter's reset). The promise is kept
//     on every broker, whatever [WithMaxInProcessTime]: a longer d is
//     handed whole to the broker's delayed nack where it has one, and the
//     dedup store keeps the time ("not before") so that an earlier
//     redelivery is nacked again without spending an attempt. A message
//     that asks for d every time is therefore dead-lettered no sooner than
//     MaxAttempts × d after its first attempt.
//   - anything else: transient, retried with backoff within the budget.
//     Unknown errors are retried, since most are.
//
// Whether a long [After] delay stops other messages meanwhile depends on
// the broker adapter (adapters/README.md, "A long retry.After"): NATS
// JetStream and SQS delay the message in the broker; Redis Streams leaves
// its entry pending for a later claim (a delay above one second) and goes
// on; RabbitMQ requeues at once and the chain waits, holding one prefetch
// slot; GoChannel, Kafka and SQL resend a nacked message in process, so
// the subscription (the partition) waits d on every attempt.
//
// The marks survive fmt.Errorf("...: %w", err) and errors.Join, and the
// checks ([IsPermanent], [AfterDelay]) use errors.As. [Classify] makes the
// decision in one call and adds a third class, [ClassCanceled]: the error is
// context.Canceled or context.DeadlineExceeded while the delivery context is
// done, which is a shutdown, not a fault of the message. A canceled attempt
// spends no budget and is nacked; it wins even over [Permanent], so that a
// handler that wraps every error as permanent does not dead-letter messages
// during a deploy. Pass the delivery context to [Classify], not a
// per-attempt one: an attempt that hits its own timeout is a transient
// failure.
//
// # Backoff
//
// The backoff ([WithBackoff]) is exponential with equal jitter: after the
// n-th failed attempt the wait is drawn uniformly from [c/2, c], c =
// min(max, initial*2^(n-1)). The jitter spreads the consumers that failed
// together when a dependency went down, so they do not come back in
// lockstep; the floor of c/2 means no failed attempt is retried at once.
// n is the message's durable attempt number (the retry middleware takes it
// from the dedup store's count), so the wait grows across redeliveries, not
// only within one delivery. The computation saturates instead of
// overflowing, whatever n. [Policy.Delay] waits the delay of [After]
// instead when the error carries a longer one; After(0), a negative delay
// or one shorter than the draw waits the backoff, so it cannot make a tight
// redelivery loop. [WithRand] makes the draws deterministic in tests.
//
// # Budget
//
// A message has two budgets:
//
//   - [WithMaxAttempts] (default 5) is durable: the dedup store counts every
//     claim of the message, across redeliveries, consumers and crashes. A
//     counter in a local variable would let a message that kills its
//     process loop forever; this one dead-letters it. When it is spent, the
//     message goes to the dead letter.
//   - [WithInProcessAttempts] (default 3) and [WithMaxInProcessTime]
//     (default 10s) bound the retries inside one delivery: a few quick
//     attempts with backoff sleeps, then a nack, so that a message does not
//     hold its broker lease (ack deadline, visibility timeout) for long and
//     longer waits are left to the broker's redelivery. A delay that does not
//     fit in what is left of the time budget becomes the nack's delay (a
//     backoff delay capped at MaxInProcessTime, an [After] delay whole).
//
// Every in-process attempt counts against the durable budget too, for a
// message without a key (delivery.ProcessWithoutDedup) as for a keyed
// one; a delivery the breaker paused, which ran nothing, counts for
// neither.
//
// # Outage breaker
//
// When a database or downstream API is down, every message fails
// transiently. Retrying each one burns its budget and, a few minutes later,
// fills the dead letter with messages that were fine. A [Breaker] watches
// the last signals of one consumer ([WithWindow], default 20). When at least
// [WithMinSamples] (10) are known and [WithThreshold] (80%) of them are
// transient failures, it opens: [Breaker.Allow] denies attempts and the
// consumer nacks with [Permit.Wait], running nothing and spending no
// attempt. After the cooldown ([WithCooldown], 5s) the breaker is half-open
// and lets one probe through at a time. A successful probe closes it; a
// transient failure opens it again for twice the cooldown (up to 1m).
//
// Each attempt gives the breaker a [Signal]. Only [SignalSuccess] and
// [SignalTransient] count. Permanent errors (the message is bad, not the
// dependency), duplicates and cancellations are [SignalNeutral]: recording
// them changes nothing, and a neutral probe only frees the probe slot.
// [SignalOf] maps a [Class] to its Signal.
//
// Each process decides alone from what it sees; there is no shared state.
// Time is read with time.Now, so tests drive it with testing/synctest.
package retry
