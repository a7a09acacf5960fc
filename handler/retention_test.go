package handler_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
)

// The guarantees table's last row: a duplicate is recognised while the
// store keeps the DONE record, and runs again once the store forgot it
// (retention passed).
func TestDuplicateAfterRetentionRunsAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(idempotency.WithRetention(time.Hour))
		require.NoError(t, err)
		e := &env{store: faults.NewStore(mem), mem: mem, dead: faults.NewPublisher(0)}
		var calls atomic.Int32
		h := e.chain(t, func(*message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, nil
		}, handler.WithStore(e.store, "orders"))
		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		time.Sleep(59 * time.Minute)
		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load(), "within the retention a duplicate is not run")
		require.EqualValues(t, 1, e.count(handler.OutcomeDuplicate))
		time.Sleep(2 * time.Minute) // the retention has passed: the record is forgotten
		_, err = h(delivery("order-1", "pay 10"))
		require.NoError(t, err)
		require.EqualValues(t, 2, calls.Load(), "once the store forgot the record, a duplicate runs again")
	})
}
