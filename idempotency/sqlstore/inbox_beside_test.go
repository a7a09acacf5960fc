package sqlstore_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/internal/faults"
)

// By default (no WithInTxClaims) the dedup step claims before the handler
// runs, also after the inbox has run once: a handler that does something
// beside the inbox for some messages never repeats it for a duplicate.
func TestInboxDefaultClaimsBeforeCodeBesideIt(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		s := newStore(t, db, b.dialect)
		var external atomic.Int32
		inbox := s.Inbox(func(context.Context, *sql.Tx, *message.Message) ([]*message.Message, error) { return nil, nil })
		h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
			if string(msg.Payload) == "external" {
				external.Add(1) // an effect outside the inbox's transaction
				return nil, nil
			}
			return inbox(msg)
		}, handler.WithStore(s, inboxNS), handler.WithDeadLetter(faults.NewPublisher(0), deadTopic),
			handler.WithBreaker(nil))
		require.NoError(t, err)
		_, err = h(counted(delivery("warm-"+randomHex(4), "warm up"), 1)) // the inbox runs once
		require.NoError(t, err)
		for range 3 {
			_, err := h(counted(delivery("ext-1", "external"), 1))
			require.NoError(t, err)
		}
		require.Equal(t, int32(1), external.Load(), "a duplicate is answered by the claim, before the handler")
	})
}
