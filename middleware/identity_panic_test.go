package middleware_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
)

// A key source that panics makes Identity's failure a final one with
// reason panic (not no_key), naming the key source, and the handler does
// not run.
func TestIdentityKeySourcePanicIsPanic(t *testing.T) {
	t.Parallel()
	ex, err := idempotency.NewExtractor(idempotency.WithSources(func(*message.Message) (string, error) { panic("bad source") }))
	require.NoError(t, err)
	for _, policy := range []delivery.MissingKeyPolicy{delivery.RejectMissingKey, delivery.ProcessWithoutDedup} {
		id, err := middleware.Identity(ex, policy)
		require.NoError(t, err)
		ran := false
		_, err = id(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })(message.NewMessage("u-1", []byte(`{}`)))
		fe, ok := dlq.AsFinal(err)
		require.True(t, ok, "final: %v", err)
		require.Equal(t, dlq.ReasonPanic, fe.Reason)
		var pe *middleware.PanicError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "key source", pe.Where)
		require.False(t, ran)
	}
}
