package handler_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/retry"
)

// errInvalidOrder is a package-level final error, returned as is by every
// failing message: surely must never write into it.
var errInvalidOrder = dlq.Final(dlq.ReasonPermanent, errors.New("invalid order"))

// TestSharedFinalErrorIsNotMutated: a *dlq.FinalError shared by several
// messages (a sentinel) is never written: each dead letter names its own
// operation, attempts and history, the sentinel keeps its zero fields, and
// errors.Is still finds it in what the chain returns.
func TestSharedFinalErrorIsNotMutated(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		var got []error
		h := e.chain(t, func(m *message.Message) ([]*message.Message, error) {
			if string(m.Payload) == "retry first" && len(got) == 0 {
				got = append(got, nil)
				return nil, errors.New("database busy")
			}
			return nil, errInvalidOrder
		}, handler.WithPolicy(mustPolicy(t, retry.WithInProcessAttempts(2), retry.WithMaxInProcessTime(time.Second))))
		_, err := h(delivery("order-1", "retry first"))
		require.NoError(t, err)
		_, err = h(delivery("order-2", "b"))
		require.NoError(t, err)
		dead := e.dead.Published(deadTopic)
		require.Len(t, dead, 2)
		require.Equal(t, "order-1", dead[0].Metadata.Get(dlq.KeyOperationKey))
		require.Equal(t, "2", dead[0].Metadata.Get(dlq.KeyAttempts))
		require.Equal(t, "order-2", dead[1].Metadata.Get(dlq.KeyOperationKey))
		require.Equal(t, "1", dead[1].Metadata.Get(dlq.KeyAttempts))
		h1, err := envelope.ParseHistory(dead[1].Metadata.Get(dlq.KeyHistory))
		require.NoError(t, err)
		require.Len(t, h1, 1, "order-2's own history")
		require.Zero(t, errInvalidOrder.Attempts)
		require.Nil(t, errInvalidOrder.History)
		require.Empty(t, errInvalidOrder.OperationKey)
		require.Empty(t, errInvalidOrder.Namespace)
	})
}

// TestSharedFinalErrorConcurrentUse: messages failing concurrently with one
// sentinel *dlq.FinalError (run with -race).
func TestSharedFinalErrorConcurrentUse(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	h := e.chain(t, func(*message.Message) ([]*message.Message, error) { return nil, errInvalidOrder })
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 25 {
				_, err := h(delivery(fmt.Sprintf("order-%d-%d", i, j), "p"))
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	dead := e.dead.Published(deadTopic)
	require.Len(t, dead, 100)
	keys := map[string]bool{}
	for _, d := range dead {
		keys[d.Metadata.Get(dlq.KeyOperationKey)] = true
		require.Equal(t, "1", d.Metadata.Get(dlq.KeyAttempts))
	}
	require.Len(t, keys, 100, "every dead letter names its own operation")
	require.Empty(t, errInvalidOrder.OperationKey)
}
