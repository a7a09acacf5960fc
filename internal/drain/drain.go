// Package drain is the close step that surely's broker adapters share: a
// subscriber that stops handing out messages waits for the ones in flight
// to be acked or nacked, up to a close timeout, and only then gives up on
// the rest and releases its connection.
//
// The adapters count their work in flight (the goroutines that settle a
// delivery once its message is acked or nacked, the subscriptions that
// hand messages out) in a sync.WaitGroup, and close an abandon channel to
// make those goroutines stop waiting for a settlement: what is still
// unsettled then is left to the broker, which redelivers it.
package drain

import (
	"sync"
	"time"
)

// Wait waits until inflight is done or timeout has passed, whichever comes
// first; then it closes abandon, so that the goroutines counted in
// inflight stop waiting for their messages' settlement, and waits for
// inflight again (they return promptly once abandon is closed). It reports
// whether the timeout passed with work still in flight (the caller logs
// that those messages will be redelivered). A timeout of 0 or less gives
// up at once.
//
// Wait closes abandon: call it once per channel.
func Wait(inflight *sync.WaitGroup, timeout time.Duration, abandon chan<- struct{}) (timedOut bool) {
	done := make(chan struct{})
	go func() {
		inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	select {
	case <-done:
	case <-t.C:
		select {
		case <-done: // done and timed out at once: nothing was left
		default:
			timedOut = true
		}
	}
	t.Stop()
	close(abandon)
	<-done
	return timedOut
}

// Chan receives from c until it is closed, so that the goroutine that
// sends on it (a Watermill subscriber's, still handing out messages that
// nobody takes) can end.
func Chan[T any](c <-chan T) {
	for range c {
	}
}
