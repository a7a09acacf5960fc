// Package opctx is the dedup step's state of the running attempt, in the
// message context: the operation that idempotency.OperationFrom shows the
// handler (a copy), and the signals between the dedup step and a handler
// that claims inside its own transaction (the SQL inbox). Only surely's
// own packages reach it; a user's handler sees the read-only view.
package opctx

import (
	"context"
	"sync/atomic"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

// Op is the dedup step's state of one attempt. The chain changes it in
// place (the claim's attempt and token, the commit signal); the handler
// gets copies of its Operation through idempotency.OperationFrom.
type Op struct {
	idempotency.Operation
	// Committed is set by a transactional handler (the SQL inbox) that wrote
	// the DONE mark, with the outcome, in the same transaction as its effect
	// and committed it. Dedup then skips its own Complete.
	Committed bool
	// InTx is the dedup step's offer to a handler that claims inside its
	// own transaction; nil outside the dedup step. See InTxClaims.
	InTx *InTxClaims
	// Deferred, when not nil, is a claim the dedup step left to the handler
	// (which accepted InTx): the operation is not claimed yet.
	Deferred *DeferredClaim
}

// With returns a context carrying op.
func With(ctx context.Context, op *Op) context.Context {
	return context.WithValue(ctx, idem.OperationKey{}, op)
}

// From returns the state of the attempt running with ctx.
func From(ctx context.Context) (*Op, bool) {
	op, ok := ctx.Value(idem.OperationKey{}).(*Op)
	return op, ok
}

// InTxClaims is how the dedup step and a handler that can claim inside its
// own transaction (the SQL inbox, sqlstore.Store.Inbox) find each other.
// The dedup step gives every Op of one wrapped handler the same
// *InTxClaims (Op.InTx). A handler able to claim in its transaction on
// that store calls Accept on each call; from then on the dedup step may
// leave a claim to it (Op.Deferred) instead of claiming first.
type InTxClaims struct {
	store    idempotency.Store
	accepted atomic.Bool
}

// NewInTxClaims returns the offer of a dedup step claiming on store.
func NewInTxClaims(store idempotency.Store) *InTxClaims { return &InTxClaims{store: store} }

// Store is the store of the dedup step that made the offer.
func (c *InTxClaims) Store() idempotency.Store { return c.store }

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
	Request idempotency.ClaimRequest
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
	// it sets Op.Committed as well. When the effect was rolled back with
	// the claim, the handler claims again, durably, before returning, so
	// that the failure can be recorded on Result's lease.
	Made   bool
	Result idempotency.ClaimResult
}

// Acquired tells op about the claim res it acquired: the attempt, the
// token and how the previous attempt ended.
func (op *Op) Acquired(res idempotency.ClaimResult) {
	op.Attempt, op.Token = res.Lease.Attempt, res.Lease.Token
	op.Previous, op.PreviousError = res.Previous, res.PreviousError
}
