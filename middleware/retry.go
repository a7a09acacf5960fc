package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/retry"
)

// leaseLostWait paces the nack of an attempt whose lease was taken over.
const leaseLostWait = 100 * time.Millisecond

// Retry runs the inner chain up to policy.InProcessAttempts() times per
// delivery, with backoff and jitter between attempts, while the total
// stays inside policy.MaxInProcessTime(). Classification decides:
//
//   - nil: done.
//   - a *dlq.FinalError, retry.Permanent: no retry; returned for the dead letter.
//   - cancellation of the message context: returned at once (not a failure).
//   - *InProgressError, *LeaseLostError: not a failure; nacked after a wait
//     (for InProgressError, its Wait as the store measured it, at most 5s).
//   - anything else is transient: retried in process, then nacked after the
//     backoff delay, so the broker redelivers it for the next durable attempt.
//     The backoff is policy.Delay of the message's durable attempt number
//     (the Operation.Attempt that Dedup sets, found in the context or in the
//     report of Observe or Trace outside Retry, as in handler.New; else the
//     attempts of this delivery), so the delay grows across redeliveries,
//     not only within one.
//
// An error marked with retry.After(d) is retried no sooner than d after
// the failure, on every broker: a d that does not fit in MaxInProcessTime
// is handed whole to the broker's delayed nack when it has one; otherwise
// Retry waits at most MaxInProcessTime before the nack, and Dedup's store
// record (idempotency.Failure.RetryAfter, Record.NotBefore) answers an
// earlier redelivery with InProgress, which is nacked again and not
// charged to the attempt budget.
//
// A "delayed nack" uses the broker's own delay when the adapter provides a
// delivery.Control that supports it (NATS JetStream NakWithDelay, SQS
// visibility); otherwise it is a wait before the error is returned, which
// paces the consumer: the point when a dependency is down.
//
// breaker may be nil. When it is open, no attempt runs: the message is
// nacked after the breaker's wait (ErrPaused), so an outage does not spend
// attempt budgets nor flood the dead letter; one probe at a time tests
// whether the dependency is back.
func Retry(policy *retry.Policy, breaker *retry.Breaker) (message.HandlerMiddleware, error) {
	if policy == nil {
		return nil, fmt.Errorf("%w: nil retry policy", ErrInvalidOption)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			rep := reportFrom(ctx)
			start := time.Now()
			for n := 1; ; n++ {
				permit := retry.Permit{Allowed: true}
				if breaker != nil {
					permit = breaker.Allow()
					if !permit.Allowed {
						setOutcome(ctx, delivery.OutcomePaused)
						nackAfter(ctx, permit.Wait)
						return nil, ErrPaused
					}
				}
				if rep != nil {
					rep.attempts++
				}
				msgs, err := rep.runAttempt(h, msg)
				msg.SetContext(ctx)
				signal, again := classify(ctx, err)
				if breaker != nil {
					breaker.Record(permit, signal)
				}
				if !again {
					return msgs, err
				}
				var ip *InProgressError
				var ll *LeaseLostError
				if errors.As(err, &ip) || errors.As(err, &ll) {
					// A lost lease has a new owner: the redelivery's claim
					// learns its lease expiry and waits for that instead.
					wait := leaseLostWait
					if ip != nil {
						wait = min(max(ip.wait(), 10*time.Millisecond), defaults.MaxInProgressWait)
					}
					nackAfter(ctx, wait)
					return nil, err
				}
				setOutcome(ctx, delivery.OutcomeRetry)
				delay := policy.Delay(durableAttempt(ctx, rep, n), err)
				if n >= policy.InProcessAttempts() || time.Since(start)+delay > policy.MaxInProcessTime() {
					// A retry.After delay is a promise ("not before d"):
					// the broker gets all of it. Waiting here is capped;
					// the store's NotBefore turns an earlier redelivery
					// into an uncharged InProgress.
					brokerDelay := min(delay, policy.MaxInProcessTime())
					if _, ok := retry.AfterDelay(err); ok {
						brokerDelay = delay
					}
					nackCapped(ctx, brokerDelay, min(delay, policy.MaxInProcessTime()))
					return nil, err
				}
				if !sleep(ctx, delay) {
					return nil, err
				}
			}
		}
	}, nil
}

// durableAttempt is the number of the attempt that just failed, for the
// backoff: the message's attempt as the dedup step counted it
// (idempotency.Operation.Attempt, across deliveries and consumers), or n,
// the attempts of this delivery, when no dedup step reported one. The
// operation is in ctx when Identity runs outside Retry, else in the
// delivery's report (handler.New's order).
func durableAttempt(ctx context.Context, rep *report, n int) int {
	a := 0
	if op, ok := idempotency.OperationFrom(ctx); ok {
		a = op.Attempt
	} else if rep != nil {
		a = rep.op.Attempt
	}
	return max(a, n)
}

// classify maps an attempt's error to the breaker's signal, and says whether
// the delivery may go on (true) or must return now.
func classify(ctx context.Context, err error) (retry.Signal, bool) {
	if err == nil {
		return retry.SignalSuccess, false
	}
	if _, ok := dlq.AsFinal(err); ok {
		return retry.SignalNeutral, false
	}
	switch retry.Classify(ctx, err) {
	case retry.ClassPermanent, retry.ClassCanceled:
		return retry.SignalNeutral, false
	}
	var ip *InProgressError
	var ll *LeaseLostError
	if errors.As(err, &ip) || errors.As(err, &ll) {
		return retry.SignalNeutral, true
	}
	return retry.SignalTransient, true
}

// nackAfter arranges for the nack that follows to be redelivered no sooner
// than d: through the broker when the adapter put a delivery.Control in the
// context and the broker supports delays, else by waiting here.
func nackAfter(ctx context.Context, d time.Duration) { nackCapped(ctx, d, d) }

// nackCapped is nackAfter waiting here at most local when the broker has
// no delayed nack: a handler that waits holds its broker lease and its
// consumer.
func nackCapped(ctx context.Context, d, local time.Duration) {
	if c, ok := delivery.ControlFrom(ctx); ok && c.NackAfter(d) {
		return
	}
	sleep(ctx, min(d, local))
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
