package idempotency

import (
	"context"
	"time"

	"github.com/surely-dev/surely/internal/idem"
)

// Operation is what the dedup step tells the business handler about the
// attempt it runs, through the message context (OperationFrom). It is a
// copy: changing it changes nothing in the chain.
type Operation struct {
	// Namespace and Key identify the operation. Pass Key on as the
	// idempotency key of external APIs.
	Namespace string
	Key       string
	// Fingerprint of the payload.
	Fingerprint string
	// Attempt counts every claim ever made for the key, this one included.
	Attempt int
	// Token is the fencing token of this attempt's lease: guard your own
	// writes with it (a write carrying an older token must lose).
	Token string
	// Previous tells how the previous attempt ended ("" if there was
	// none). ResultUnknown means its owner died holding the lease: an
	// external effect may have happened, so reconcile before acting again.
	Previous AttemptResult
	// PreviousError is the error text of the previous attempt when
	// Previous is ResultFailed.
	PreviousError string
	// Retention is the store's record retention, when it reports one
	// (RetentionReporter); 0 otherwise.
	Retention time.Duration
}

// view is how OperationFrom reads the dedup step's state of the running
// attempt, which embeds an Operation (internal/opctx).
func (o *Operation) view() Operation { return *o }

type viewer interface{ view() Operation }

// OperationFrom returns the operation of the attempt running with ctx, as
// the dedup step knows it when OperationFrom is called (a copy).
func OperationFrom(ctx context.Context) (Operation, bool) {
	if v, ok := ctx.Value(idem.OperationKey{}).(viewer); ok {
		return v.view(), true
	}
	return Operation{}, false
}

// KeyFrom returns the operation key of the attempt running with ctx, or "".
func KeyFrom(ctx context.Context) string {
	op, _ := OperationFrom(ctx)
	return op.Key
}
