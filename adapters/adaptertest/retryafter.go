package adaptertest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/retry"
)

// testRetryAfterPastInProcess: a retry.After(d) longer than the in-process
// time budget is still kept: the next attempt runs no sooner than d after
// the failure, with or without a broker delay (without one, the store's
// retry-after time turns the early redeliveries into uncharged nacks), and
// it is the second attempt.
func testRetryAfterPastInProcess(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	e := setup(t, newAdapter, f)
	const key, delay = "order-1", time.Second
	c := e.defaultChain()
	c.inProcess = delay / 5 // the delay does not fit: nacked
	var (
		mu       sync.Mutex
		failed   time.Time
		ran      time.Time
		attempts []int
	)
	e.consume(t, e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
		op, _ := idempotency.OperationFrom(msg.Context())
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, op.Attempt)
		if op.Attempt == 1 {
			failed = time.Now()
			return nil, retry.After(delay, errors.New("rate limited"))
		}
		ran = time.Now()
		return nil, nil
	}, c))
	e.publish(t, order(key, "pay 10"))
	e.rec.waitFor(t, waitTimeout, "acked after the delay", ackedAndSettled(key))
	mu.Lock()
	defer mu.Unlock()
	t.Logf("second attempt %v after the failure, for a %v retry-after (%d deliveries)", ran.Sub(failed), delay, len(e.rec.of(key)))
	require.Equal(t, []int{1, 2}, attempts, "early redeliveries are not charged and do not run the handler")
	require.GreaterOrEqual(t, ran.Sub(failed), delay-nackTolerance, "attempted again before the retry-after delay")
}
