package middleware

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/retry"
)

// DeadLetter publishes a message whose chain ended in a final failure (a
// *dlq.FinalError, or an error marked retry.Permanent) to pub, and returns
// nil only after that publish succeeded, so the router acks the source
// after its dead letter is durable. If the publish fails, it waits 1s (or
// nacks with the broker's delay), so that a broken dead letter does not
// spin, and returns both errors joined: the router nacks and nothing is
// lost. Transient errors pass through untouched.
//
// A shutdown beats a final verdict: when the message context is done and
// the error is (or wraps) its cancellation, even one marked
// retry.Permanent or wrapped in a *dlq.FinalError, nothing is published
// and the error is returned (nacked, outcome canceled), as retry.Classify
// decides and the dedup step releases the claim (no attempt charged).
//
// Returning nil is what makes Watermill ack; Observe (outside this step)
// still reports the delivery as dead_lettered, not processed.
func DeadLetter(pub *dlq.Publisher) (message.HandlerMiddleware, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: nil dead-letter publisher", ErrInvalidOption)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msgs, err := h(msg)
			if err == nil {
				return msgs, nil
			}
			ctx := msg.Context()
			if retry.Classify(ctx, err) == retry.ClassCanceled {
				// A shutdown beats a final verdict (as in retry.Classify
				// and the dedup step's release): nack, no dead letter.
				setOutcome(ctx, delivery.OutcomeCanceled)
				return msgs, err
			}
			_, final := dlq.AsFinal(err)
			permanent := retry.IsPermanent(err) && !errors.Is(err, ErrStoreUnavailable)
			if !final && !permanent {
				return msgs, err
			}
			ctx = attemptContext(ctx)
			f := dlq.FailureFrom(err)
			if op, ok := idempotency.OperationFrom(ctx); ok {
				if f.OperationKey == "" {
					f.OperationKey, f.Fingerprint = op.Key, op.Fingerprint
				}
				if f.Namespace == "" {
					f.Namespace, f.Retention = op.Namespace, op.Retention
				}
			}
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				f.TraceID, f.SpanID = sc.TraceID().String(), sc.SpanID().String()
			}
			pctx, span := startDeadLetter(ctx, msg, &f, pub.Topic())
			perr := pub.Publish(pctx, msg, f)
			endDeadLetter(span, perr)
			if perr != nil {
				setOutcome(ctx, delivery.OutcomeDeadLetterFailed)
				nackAfter(ctx, defaults.DeadLetterRetryWait)
				return nil, errors.Join(perr, err)
			}
			setOutcome(ctx, delivery.OutcomeDeadLettered)
			if r := reportFrom(ctx); r != nil {
				r.reason, r.cause = string(f.Reason), f.Err
			}
			return nil, nil
		}
	}, nil
}
