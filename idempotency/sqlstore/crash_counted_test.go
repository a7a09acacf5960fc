package sqlstore_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
)

// counted returns msg as delivered by a broker that counts deliveries,
// with count n.
func counted(msg *message.Message, n int) *message.Message {
	msg.SetContext(surelydelivery.WithInfo(msg.Context(), surelydelivery.Info{Count: n}))
	return msg
}

// A crash inside the one transaction of a first delivery from a counting
// broker: the claim, the effect and the DONE mark die together, so the
// store has no record at all. The broker's redelivery (count 2) commits
// its claim before the effect, and commits the effect once.
func TestCrashInsideTransactionCounted(t *testing.T) {
	forEachCrash(t, []crashPath{pathInTx}, func(t *testing.T, c *crashEnv) {
		key := "order-" + randomHex(4)
		c.runChildCounted(t, key, "pay 10", crashInTx, 1)

		require.Zero(t, c.count(t, key), "the uncommitted effect died with the process")
		_, err := c.store.Get(t.Context(), crashNamespace, key)
		require.ErrorIs(t, err, idempotency.ErrNotFound, "the claim died with it: one transaction")

		outcome := c.runChildCounted(t, key, "pay 10", "", 2)
		require.Equal(t, string(handler.OutcomeProcessed), outcome)
		require.Equal(t, 1, c.count(t, key), "effect exactly once")
		rec := c.record(t, key)
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 1, rec.Attempts, "the first delivery's attempt left no record")
		require.Equal(t, idempotency.ResultDone, rec.History[0].Result)
	})
}

// A crash after the one transaction committed, before the ack: the
// redelivery is a duplicate.
func TestCrashAfterCommitCounted(t *testing.T) {
	forEachCrash(t, []crashPath{pathInTx}, func(t *testing.T, c *crashEnv) {
		key := "order-" + randomHex(4)
		c.runChildCounted(t, key, "pay 10", crashAfterCommit, 1)

		require.Equal(t, 1, c.count(t, key), "the effect committed")
		rec := c.record(t, key)
		require.Equal(t, idempotency.StateDone, rec.State, "with its DONE mark")
		require.Equal(t, 1, rec.Attempts)

		outcome := c.runChildCounted(t, key, "pay 10", "", 2)
		require.Equal(t, string(handler.OutcomeDuplicate), outcome)
		require.Equal(t, 1, c.count(t, key), "effect exactly once")
	})
}

// A message that kills the process on every attempt ends dead-lettered,
// without an effect, after its budget (5 attempts). With WithInTxClaims,
// from a broker that counts deliveries, the first delivery's attempt (one
// transaction) leaves no record and every later one is committed before
// its effect, so it takes at most one crash more than the budget; from a
// broker that counts none, every attempt is committed before its effect.
// On the default path the dedup step commits every claim before the
// effect's transaction, whatever the broker counts: exactly the budget.
func TestCrashEveryAttempt(t *testing.T) {
	const budget = 5 // crashChild's policy
	for _, broker := range []struct {
		name    string
		path    crashPath
		count   bool
		crashes int
	}{
		{"counting", pathInTx, true, budget + 1},
		{"noncounting", pathInTx, false, budget},
		{"default", pathDefault, true, budget},
	} {
		for _, b := range crashBackends {
			t.Run(broker.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				c := setupCrash(t, b, broker.path)
				key := "order-" + randomHex(4)
				count := func(i int) int {
					if broker.count {
						return i
					}
					return 0
				}
				for i := 1; i <= broker.crashes; i++ {
					c.runChildCounted(t, key, "poison", crashInTx, count(i))
					require.Zero(t, c.count(t, key), "crash %d", i)
				}
				outcome := c.runChildCounted(t, key, "poison", "", count(broker.crashes+1))
				require.Equal(t, string(handler.OutcomeDeadLettered), outcome)
				require.Zero(t, c.count(t, key), "no effect ever committed")
				rec := c.record(t, key)
				require.Equal(t, idempotency.StateExhausted, rec.State)
				require.Equal(t, budget, rec.Attempts)
				for _, h := range rec.History {
					require.Equal(t, idempotency.ResultUnknown, h.Result, "every recorded attempt died")
				}
			})
		}
	}
}
