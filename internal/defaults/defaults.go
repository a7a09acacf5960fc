// Package defaults holds every default and bound that one package of
// surely needs from another (retry's attempt budget in middleware,
// middleware's lease in handler, the stores' retention and the bounds of
// what they keep, ...), and surely's tests. Each is documented at the
// option that changes it or in the package doc of idempotency; none is
// part of the API. It imports nothing of surely, so that every package can
// import it.
package defaults

import "time"

const (
	// Lease is the lease of a claim (middleware.WithLease, handler.WithLease).
	Lease = 30 * time.Second
	// MinLease is the shortest lease WithLease accepts.
	MinLease = 10 * time.Millisecond
	// StoreTimeout bounds every store call, or a third of a lease shorter
	// than three times it (WithStoreTimeout).
	StoreTimeout = 5 * time.Second
	// MaxAttempts is the durable attempt budget (retry.WithMaxAttempts,
	// middleware.WithMaxAttempts).
	MaxAttempts = 5
	// MaxInProcessTime bounds the in-process retries of one delivery
	// (retry.WithMaxInProcessTime).
	MaxInProcessTime = 10 * time.Second
	// MaxInProgressWait bounds how long middleware.Retry waits before it
	// nacks a message whose operation is in progress elsewhere.
	MaxInProgressWait = 5 * time.Second
	// DeadLetterRetryWait is how long middleware.DeadLetter waits before it
	// nacks when the dead-letter publish failed, so that a broken dead
	// letter does not spin.
	DeadLetterRetryWait = time.Second
)

// Retention is every store's retention unless
// idempotency.WithRetention is given (its doc states it).
const Retention = 24 * time.Hour

// Bounds shared by every store and by the dead-letter envelope (the
// package doc of idempotency states them).
const (
	// MaxKeyLen is the longest operation key accepted, in bytes.
	MaxKeyLen = 512
	// MaxHistory is how many attempt records a store keeps per key (newest kept).
	MaxHistory = 20
	// MaxErrorLen bounds the error text kept per attempt, in bytes.
	MaxErrorLen = 2048
	// MaxStackLen bounds the stack kept per attempt, in bytes.
	MaxStackLen = 4096
	// MaxOwnerLen bounds a claim's owner (the process that made it), in
	// bytes.
	MaxOwnerLen = 255
	// ListLimit and MaxListLimit bound a page of a listing
	// (idempotency.ListFilter.Limit): the default and the largest.
	ListLimit    = 50
	MaxListLimit = 10000
)
