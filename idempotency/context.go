package idempotency

import (
	"context"
	"time"
)

// Operation is what the dedup step tells the business handler about the
// attempt it runs, through the message context.
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
	// Previous tells how the previous attempt ended. PreviousUnknown means
	// its owner died holding the lease: an external effect may have happened,
	// so reconcile before acting again.
	Previous Previous
	// Committed is set by a transactional handler (the SQL inbox) that wrote
	// the DONE mark, with the outcome, in the same transaction as its effect
	// and committed it. Dedup then skips its own Complete.
	Committed bool
	// Retention is the store's record retention, when it reports one
	// (RetentionReporter); 0 otherwise.
	Retention time.Duration
}

type operationKey struct{}

// WithOperation returns a context carrying op.
func WithOperation(ctx context.Context, op *Operation) context.Context {
	return context.WithValue(ctx, operationKey{}, op)
}

// OperationFrom returns the operation of the attempt running with ctx.
func OperationFrom(ctx context.Context) (*Operation, bool) {
	op, ok := ctx.Value(operationKey{}).(*Operation)
	return op, ok
}

// KeyFrom returns the operation key of the attempt running with ctx, or "".
func KeyFrom(ctx context.Context) string {
	if op, ok := OperationFrom(ctx); ok {
		return op.Key
	}
	return ""
}
