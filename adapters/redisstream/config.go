package redisstream

import (
	"errors"
	"time"
)

// Errors of Extend (delivery.Control), wrapped.
var (
	// errNotPending: the entry is no longer in the group's pending entries
	// list (acked, or deleted from the stream).
	errNotPending = errors.New("redisstream: entry not pending")
	// errClaimed: another consumer of the group claimed the entry.
	errClaimed = errors.New("redisstream: entry claimed by another consumer")
)

// holdLimit is the longest NackAfter delay the subscriber holds a message
// in process for, blocking its subscription; a longer one leaves the entry
// pending for a later claim (see the package doc).
const holdLimit = time.Second
