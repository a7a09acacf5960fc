package middleware

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/opctx"
)

// report is shared by the steps of one delivery through the message context.
// Trace or Observe, whichever is outermost, installs it; the inner steps
// fill it. Steps used without either find none and skip reporting.
type report struct {
	// op is the operation slot Identity fills, saving it an allocation.
	op       opctx.Op
	outcome  delivery.Outcome
	attempts int // attempts run in this delivery
	attempt  int // durable attempt number of the last one
	reason   string
	cause    error // the dead-lettered failure (dlq.Failure.Err)
	// takeovers counts the claims of this delivery that took over an
	// expired lease (Previous unknown).
	takeovers int
	// trace is the delivery's tracing state, nil when Trace is not in the chain.
	trace *traceState
}

type reportKey struct{}

func reportFrom(ctx context.Context) *report {
	r, _ := ctx.Value(reportKey{}).(*report)
	return r
}

// withReport returns ctx's report, or a new one and ctx carrying it: the
// outermost of Trace and Observe installs it.
func withReport(ctx context.Context) (context.Context, *report) {
	if r := reportFrom(ctx); r != nil {
		return ctx, r
	}
	r := new(report)
	return context.WithValue(ctx, reportKey{}, r), r
}

func setOutcome(ctx context.Context, o delivery.Outcome) {
	if r := reportFrom(ctx); r != nil {
		r.outcome = o
	}
}

// claimed records an Acquired claim: Dedup calls it before the handler runs.
func (r *report) claimed(ctx context.Context, store idempotency.Store, op *opctx.Op) {
	r.attempt = op.Attempt
	if op.Previous == idempotency.ResultUnknown {
		r.takeovers++
	}
	if r.trace != nil {
		r.trace.claimed(ctx, store, op)
	}
}

// runAttempt runs one attempt of the inner chain; Retry calls it once per
// in-process attempt, so that each gets its own span. r may be nil.
func (r *report) runAttempt(h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	if r == nil || r.trace == nil {
		return h(msg)
	}
	return r.trace.runAttempt(h, msg)
}
