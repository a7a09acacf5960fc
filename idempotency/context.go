package idempotency

import (
	"context"
	"sync/atomic"
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
	// InTx is the dedup step's offer to a handler that claims inside its
	// own transaction; nil outside the dedup step. See InTxClaims.
	InTx *InTxClaims
	// Deferred, when not nil, is a claim the dedup step left to the handler
	// (which accepted InTx): the operation is not claimed yet.
	Deferred *DeferredClaim
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

// InTxClaims is how the dedup step and a handler that can claim inside its
// own transaction (the SQL inbox, sqlstore.Store.Inbox) find each other.
// The dedup step gives every Operation of one wrapped handler the same
// *InTxClaims (Operation.InTx). A handler able to claim in its transaction
// on that store calls Accept on each call; from then on the dedup step may
// leave a claim to it (Operation.Deferred) instead of claiming first.
// Nothing else needs to touch it.
type InTxClaims struct {
	store    Store
	accepted atomic.Bool
}

// NewInTxClaims returns the offer of a dedup step claiming on store.
func NewInTxClaims(store Store) *InTxClaims { return &InTxClaims{store: store} }

// Store is the store of the dedup step that made the offer.
func (c *InTxClaims) Store() Store { return c.store }

// Accept tells the dedup step that its handler claims inside its own
// transaction on Store().
func (c *InTxClaims) Accept() { c.accepted.Store(true) }

// Accepted reports whether the handler accepted the offer.
func (c *InTxClaims) Accepted() bool { return c.accepted.Load() }

// DeferredClaim is a claim that the dedup step left to a handler that
// accepted InTxClaims: the handler makes it (in its transaction, or
// committed on its own first when Durable), and stores what it got in
// Result, setting Made. Until Made is set, the operation is not claimed
// and the handler must not run any effect.
type DeferredClaim struct {
	// Request is the claim to make.
	Request ClaimRequest
	// Durable asks for the claim to be committed before the effect runs
	// (a redelivery, or a delivery from a broker that does not count its
	// deliveries), so that an attempt that crashes the process is counted.
	// Otherwise the claim may commit with the effect, in one transaction:
	// a crash then leaves no trace in the store, and the broker's delivery
	// count bounds the redeliveries.
	Durable bool
	// PriorDeliveries is how many earlier deliveries of the message the
	// broker reports (its delivery count - 1; 0 when it reports none). A
	// claim that finds no record after earlier deliveries tells the
	// handler that the previous attempt's outcome is unknown. They are not
	// charged to the budget: a broker also counts the deliveries that were
	// nacked without an attempt.
	PriorDeliveries int
	// Made is set by the handler once it made the claim, with its result in
	// Result. When Result is Acquired and the handler committed the effect,
	// it sets Operation.Committed as well. When the effect was rolled back
	// with the claim, the handler claims again, durably, before returning,
	// so that the failure can be recorded on Result's lease.
	Made   bool
	Result ClaimResult
}
