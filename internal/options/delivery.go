package options

import "time"

// Names of the options of the adapters' family (delivery.Option) that
// several adapters take, each with the adapter's own bounds.
const (
	Concurrency    = "WithConcurrency"    // int, positive
	AckWait        = "WithAckWait"        // time.Duration, positive
	ResendInterval = "WithResendInterval" // time.Duration, positive
)

// DefaultCloseTimeout is the close timeout of an adapter given no
// delivery.WithCloseTimeout (the doc of that option says so).
const DefaultCloseTimeout = 30 * time.Second
