package middleware_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
)

var errDeclined = dlq.Final(dlq.ReasonPermanent, errors.New("card declined"))

// TestDedupFinalErrorIsCopiedNotWritten: the attempts, history and
// operation Dedup and Identity add to a handler's *dlq.FinalError go into
// a copy, which dlq.AsFinal finds; the handler's error (here a shared
// sentinel, wrapped) is left untouched and errors.Is still finds it.
func TestDedupFinalErrorIsCopiedNotWritten(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	dedup, err := middleware.Dedup(mem, "final-copy")
	require.NoError(t, err)
	ex, err := idempotency.NewExtractor()
	require.NoError(t, err)
	identity, err := middleware.Identity(ex, delivery.RejectMissingKey)
	require.NoError(t, err)
	h := identity(dedup(func(*message.Message) ([]*message.Message, error) {
		return nil, fmt.Errorf("charge: %w", errDeclined)
	}))
	for _, key := range []string{"order-1", "order-2"} {
		msg := message.NewMessage("m-"+key, []byte("pay"))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
		_, err := h(msg)
		require.ErrorIs(t, err, errDeclined)
		fe, ok := dlq.AsFinal(err)
		require.True(t, ok)
		require.NotSame(t, errDeclined, fe)
		require.Equal(t, key, fe.OperationKey)
		require.Equal(t, "final-copy", fe.Namespace)
		require.Equal(t, 1, fe.Attempts)
		require.Len(t, fe.History, 1)
		require.Equal(t, dlq.ReasonPermanent, fe.Reason)
		require.Contains(t, err.Error(), "charge: final (permanent): card declined")
	}
	require.Zero(t, errDeclined.Attempts)
	require.Nil(t, errDeclined.History)
	require.Empty(t, errDeclined.OperationKey)
	require.Empty(t, errDeclined.Namespace)
}
