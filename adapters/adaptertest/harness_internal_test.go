package adaptertest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProgressWaitsWhileDeliveriesGoOn: the load test's wait outlasts any
// fixed bound while deliveries go on, and fails after idle once they stop.
func TestProgressWaitsWhileDeliveriesGoOn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		deliver := func(n int, every time.Duration) {
			go func() {
				for range n {
					time.Sleep(every)
					r.mu.Lock()
					r.seen = append(r.seen, &seen{})
					r.notify()
					r.mu.Unlock()
				}
			}()
		}
		start := time.Now()
		deliver(20, 10*time.Second) // slow: 200s in all, more than 90s
		all, err := r.progress(30*time.Second, 5*time.Minute, func(all []seen) bool { return len(all) == 20 })
		require.NoError(t, err)
		require.Len(t, all, 20)
		require.Equal(t, 200*time.Second, time.Since(start))

		start = time.Now()
		deliver(3, 10*time.Second) // then a stall
		_, err = r.progress(30*time.Second, 5*time.Minute, func(all []seen) bool { return len(all) == 40 })
		require.ErrorContains(t, err, "no delivery began or was settled for 30s (23 deliveries in 1m0s)")
		require.Equal(t, 60*time.Second, time.Since(start), "failed 30s after the last delivery")

		deliver(400, time.Second) // steady, but never done
		_, err = r.progress(30*time.Second, 5*time.Minute, func([]seen) bool { return false })
		require.ErrorContains(t, err, "not within 5m0s")
		time.Sleep(2 * time.Minute) // the deliveries end
	})
}
