package drain_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/internal/drain"
)

const timeout = 30 * time.Second

// settler is one message in flight: it returns when it is settled after
// settleIn, or when abandon is closed, whichever comes first, and records
// which.
func settler(wg *sync.WaitGroup, abandon <-chan struct{}, settleIn time.Duration, abandoned *bool) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(settleIn)
		defer t.Stop()
		select {
		case <-t.C:
		case <-abandon:
			*abandoned = true
		}
	}()
}

func TestWaitReturnsWhenTheLastMessageIsSettled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		abandon := make(chan struct{})
		var a1, a2 bool
		settler(&wg, abandon, time.Second, &a1)
		settler(&wg, abandon, 5*time.Second, &a2)
		start := time.Now()
		require.False(t, drain.Wait(&wg, timeout, abandon))
		require.Equal(t, 5*time.Second, time.Since(start), "returned when the last one settled, not at the timeout")
		require.False(t, a1 || a2, "a message settled in time was abandoned")
		_, open := <-abandon
		require.False(t, open, "abandon is closed when Wait returns")
	})
}

func TestWaitAbandonsAfterTheTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		abandon := make(chan struct{})
		var quick, stuck bool
		settler(&wg, abandon, time.Second, &quick)
		settler(&wg, abandon, time.Hour, &stuck)
		start := time.Now()
		require.True(t, drain.Wait(&wg, timeout, abandon), "timed out with a message in flight")
		require.Equal(t, timeout, time.Since(start), "gave up at the timeout, not before nor after")
		require.False(t, quick, "the settled message was abandoned")
		require.True(t, stuck, "the stuck message was not abandoned")
	})
}

func TestWaitWithNothingInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		abandon := make(chan struct{})
		start := time.Now()
		require.False(t, drain.Wait(&wg, timeout, abandon))
		require.Zero(t, time.Since(start))
		_, open := <-abandon
		require.False(t, open)
	})
}

func TestWaitWithNoTimeoutAbandonsAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		abandon := make(chan struct{})
		var stuck bool
		settler(&wg, abandon, time.Hour, &stuck)
		start := time.Now()
		require.True(t, drain.Wait(&wg, 0, abandon))
		require.Zero(t, time.Since(start))
		require.True(t, stuck)
	})
}

func TestChanReceivesUntilClosed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := make(chan int)
		sent := 0
		go func() {
			defer close(c)
			for i := range 3 {
				c <- i
				sent++
			}
		}()
		drain.Chan(c)
		require.Equal(t, 3, sent, "every send was received")
	})
}
