package sqlstore_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
)

// TestInboxPanickingTxHandlerIsBounded: a TxHandler that panics on every
// attempt, after writing its effect, is contained: each attempt's
// transaction is rolled back, and the message ends in exactly one dead
// letter (reason panic) after the budget of 5 attempts, with or without
// an operation key, never in an endless redelivery loop.
func TestInboxPanickingTxHandlerIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
	}{{"keyed", "order-1"}, {"keyless", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			e := setupInbox(t, sqliteBackend)
			var runs atomic.Int32
			h := e.chain(t, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
				runs.Add(1)
				_, err := tx.ExecContext(ctx, "INSERT INTO "+quote(e.b.dialect, e.effects)+" (op_key, payload, attempt) VALUES (?, ?, 0)",
					tc.key, string(msg.Payload))
				require.NoError(t, err)
				panic("nil map in the pricing code")
			}, handler.WithIdentity(mustExtractor(t), handler.ProcessWithoutDedup))
			src := message.NewMessage(watermill.NewUUID(), []byte("pay 10"))
			if tc.key != "" {
				src.Metadata.Set("idempotency_key", tc.key)
			}
			deliveries := 0
			for ; deliveries < 50; deliveries++ {
				var err error
				func() {
					defer func() { require.Nil(t, recover(), "a panic escaped the chain") }()
					_, err = h(src.Copy()) // a broker redelivery: the same message
				}()
				if err == nil {
					break
				}
			}
			require.Equal(t, 5, deliveries, "5 attempts, then the dead letter (acked on the 6th delivery)")
			require.EqualValues(t, 5, runs.Load())
			require.Zero(t, e.count(t, tc.key), "every attempt's effect was rolled back")
			dead := e.dead.Published(deadTopic)
			require.Len(t, dead, 1)
			require.Equal(t, string(dlq.ReasonPanic), dead[0].Metadata.Get(dlq.KeyReason))
			require.Equal(t, "5", dead[0].Metadata.Get(dlq.KeyAttempts))
		})
	}
}
