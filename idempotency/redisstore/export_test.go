package redisstore

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
