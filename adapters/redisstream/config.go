package redisstream

import (
	"errors"
	"time"
)

// Errors of Extend (delivery.Control), wrapped.
var (
	// ErrNotPending: the entry is no longer in the group's pending entries
	// list (acked, or deleted from the stream).
	ErrNotPending = errors.New("redisstream: entry not pending")
	// ErrClaimed: another consumer of the group claimed the entry.
	ErrClaimed = errors.New("redisstream: entry claimed by another consumer")
)

// HoldLimit is the longest NackAfter delay the subscriber holds a message
// in process for, blocking its subscription; a longer one leaves the entry
// pending for a later claim (see the package doc).
const HoldLimit = time.Second
