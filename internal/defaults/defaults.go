// Package defaults holds the defaults and bounds of surely's chain that
// one package needs from another (retry's attempt budget in middleware,
// middleware's lease in handler, ...), and surely's tests. Each is
// documented at the option that changes it; none is part of the API.
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
