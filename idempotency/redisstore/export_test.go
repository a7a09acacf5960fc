package redisstore

import "github.com/surely-dev/surely/internal/defaults"

// Queued returns how many calls wait in s's batch queue, not yet sent.
func Queued(s *Store) int {
	if s.batch == nil {
		return 0
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	n := 0
	for _, p := range s.batch.queue {
		if !p.canceled {
			n++
		}
	}
	return n
}

// BatchSHA is the SHA-1 digest the batch script is called by.
func BatchSHA() string { return scriptBatch.sha }

// Idle reports whether s has no call queued or in flight in its batcher.
func Idle(s *Store) bool {
	if s.batch == nil {
		return true
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.flushers == 0 && len(s.batch.queue) == 0
}

// The defaults and bounds the package doc states.
const (
	DefaultPrefix    = defaultPrefix
	DefaultRetention = defaults.Retention
	MaxBatch         = maxBatch
)
