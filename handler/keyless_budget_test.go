package handler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/retry"
)

// The attempts of a keyless message (ProcessWithoutDedup) are counted only
// when its handler ran: the broker's count decides only whether a delivery
// is the message's first; later attempts are charged to the attempt record
// under its UUID.

// brokerCounted returns deliveries of src numbered by a broker's delivery
// count (1, 2, ...), as an adapter that reports one would.
func brokerCounted(src *message.Message, count *int) func() *message.Message {
	return func() *message.Message {
		*count++
		m := src.Copy()
		m.SetContext(surelydelivery.WithInfo(context.Background(), surelydelivery.Info{Count: *count, Redelivered: *count > 1}))
		return m
	}
}

// TestKeylessUUIDReuseRunsEveryMessage: messages without a key that share a
// UUID (their producer does not make it identify an operation) each run;
// none is acked as a duplicate of an earlier success, whatever its payload,
// with or without a broker count.
func TestKeylessUUIDReuseRunsEveryMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		count int // broker delivery count; 0: none
	}{{"attempt record", 0}, {"broker count", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				var payloads []string
				fail := true
				h := keylessChain(t, e, func(m *message.Message) ([]*message.Message, error) {
					payloads = append(payloads, string(m.Payload))
					if string(m.Payload) == "flaky" && fail {
						fail = false
						return nil, errors.New("inventory 503")
					}
					return nil, nil
				})
				deliver := func(payload string) error {
					m := message.NewMessage("fixed-id", []byte(payload))
					if tc.count > 0 {
						m.SetContext(surelydelivery.WithInfo(context.Background(), surelydelivery.Info{Count: tc.count}))
					}
					_, err := h(m)
					return err
				}
				require.NoError(t, deliver("pay 10"))
				require.NoError(t, deliver("refund 99"))
				require.NoError(t, deliver("pay 10"))
				// A message that failed once, then succeeded, leaves nothing that
				// skips the next one either.
				require.Error(t, deliver("flaky"))
				if tc.count > 0 {
					tc.count = 2 // its redelivery
				}
				require.NoError(t, deliver("flaky"))
				if tc.count > 0 {
					tc.count = 1
				}
				require.NoError(t, deliver("tick"))
				require.Equal(t, []string{"pay 10", "refund 99", "pay 10", "flaky", "flaky", "tick"}, payloads)
				require.Zero(t, e.count(handler.OutcomeDuplicate))
				require.Empty(t, e.dead.Published(deadTopic))
			})
		})
	}
}

// TestKeylessFirstSuccessCostsNoStoreCall: with a broker count, a keyless
// message that succeeds on its first delivery costs no store call.
func TestKeylessFirstSuccessCostsNoStoreCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) { return nil, nil })
		count := 0
		_, err := h(brokerCounted(delivery("", "pay 10"), &count)())
		require.NoError(t, err)
		require.Zero(t, e.store.Calls("Claim")+e.store.Calls("Release")+e.store.Calls("Complete"))
		require.EqualValues(t, 1, e.count(handler.OutcomeProcessedWithoutDedup))
	})
}

// TestKeylessBreakerPausesSpendNoBudget: deliveries the outage breaker
// paused (the handler did not run) are counted by the broker but not
// charged: once the dependency is back, the keyless message runs and is
// processed, not dead-lettered as exhausted.
func TestKeylessBreakerPausesSpendNoBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		br, err := retry.NewBreaker(retry.WithWindow(4), retry.WithMinSamples(4), retry.WithThreshold(0.5),
			retry.WithCooldown(5*time.Second, 5*time.Second))
		require.NoError(t, err)
		upAt := time.Now().Add(40 * time.Second)
		var keylessRuns, keylessDone int
		fn := func(m *message.Message) ([]*message.Message, error) {
			keyless := m.Metadata.Get(idempotency.DefaultMetadataKey) == ""
			if keyless {
				keylessRuns++
			}
			if time.Now().Before(upAt) {
				return nil, errors.New("inventory 503")
			}
			if keyless {
				keylessDone++
			}
			return nil, nil
		}
		pol, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1), retry.WithMaxInProcessTime(time.Second))
		require.NoError(t, err)
		h := keylessChain(t, e, fn, handler.WithPolicy(pol), handler.WithBreaker(br))
		for i := range 4 { // the outage opens the breaker
			_, _ = h(delivery("warm-"+string(rune('a'+i)), "x"))
		}
		require.Equal(t, retry.BreakerOpen, br.State())
		// A keyed message takes turns with the keyless one: the breaker's
		// probes are shared between them, as between a topic's messages.
		count := 0
		next := brokerCounted(delivery("", "pay 10"), &count)
		keyed := keyed("order-9", "pay 9")
		kerr, lerr := errors.New("pending"), errors.New("pending")
		for i := 0; i < 100 && (kerr != nil || lerr != nil); i++ {
			if lerr != nil {
				_, lerr = h(next())
			}
			if kerr != nil {
				_, kerr = h(keyed())
			}
		}
		require.NoError(t, lerr)
		require.Greater(t, count, 5, "the broker counted more deliveries than the budget")
		require.Positive(t, e.count(handler.OutcomePaused))
		require.Equal(t, 1, keylessDone, "processed once the dependency is back")
		require.LessOrEqual(t, keylessRuns, 5, "runs stay within the budget")
		for _, d := range e.dead.Published(deadTopic) {
			require.NotEmpty(t, d.Metadata.Get(dlq.KeyOperationKey), "the keyless message is not dead-lettered")
		}
	})
}

// TestKeylessRetryAfterKeptWithBrokerCount: a keyless message counted by
// the broker keeps its retry.After delay on a broker without a delayed
// nack: its next run comes no sooner than the delay.
func TestKeylessRetryAfterKeptWithBrokerCount(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var times []time.Time
		h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) {
			times = append(times, time.Now())
			if len(times) == 1 {
				return nil, retry.After(time.Minute, errors.New("rate limited"))
			}
			return nil, nil
		})
		count := 0
		deliverContained(t, h, brokerCounted(delivery("", "p"), &count), 100)
		require.Len(t, times, 2)
		require.GreaterOrEqual(t, times[1].Sub(times[0]), time.Minute)
		require.Positive(t, e.count(handler.OutcomeInProgress), "an early redelivery waited, uncharged")
	})
}

// TestKeylessInProcessAttemptsCountAgainstTheBudget: every in-process
// attempt of a keyless message counted by the broker is charged to the
// budget, as for a keyed one: budget 3 with 3 in-process attempts runs the
// handler 3 times, and the dead letter says so.
func TestKeylessInProcessAttemptsCountAgainstTheBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(3),
			retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(time.Second))
		require.NoError(t, err)
		e := setup(t, 0)
		var runs atomic.Int32
		h := keylessChain(t, e, func(*message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return nil, errors.New("inventory 503")
		}, handler.WithPolicy(policy))
		count := 0
		deliverContained(t, h, brokerCounted(delivery("", "p"), &count), 100)
		require.EqualValues(t, 3, runs.Load())
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 1)
		require.Equal(t, "3", dead[0].Metadata.Get(dlq.KeyAttempts))
		require.Equal(t, string(dlq.ReasonExhausted), dead[0].Metadata.Get(dlq.KeyReason))
	})
}

// TestKeylessHandlerSeesAttemptAndPrevious: the handler of a keyless
// message sees its attempt number and how the previous attempt ended, as
// a keyed one does, on both paths.
func TestKeylessHandlerSeesAttemptAndPrevious(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		counted bool
	}{{"attempt record", false}, {"broker count", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setup(t, 0)
				var seen []int
				var prev []idempotency.AttemptResult
				h := keylessChain(t, e, func(m *message.Message) ([]*message.Message, error) {
					op, ok := idempotency.OperationFrom(m.Context())
					require.True(t, ok)
					require.Empty(t, op.Key)
					seen = append(seen, op.Attempt)
					prev = append(prev, op.Previous)
					return nil, errors.New("inventory 503")
				})
				src := delivery("", "p")
				next := func() *message.Message { return src.Copy() }
				if tc.counted {
					count := 0
					next = brokerCounted(src, &count)
				}
				deliverContained(t, h, next, 100)
				require.Equal(t, []int{1, 2, 3}, seen)
				require.Equal(t, []idempotency.AttemptResult{idempotency.AttemptResult(""), idempotency.ResultFailed, idempotency.ResultFailed}, prev)
			})
		})
	}
}
