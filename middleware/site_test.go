package middleware_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/middleware"
)

// declinedAt is a panic value that knows the line it was raised on.
type declinedAt int

func (d declinedAt) Error() string { return fmt.Sprintf("card declined (line %d)", int(d)) }

// here is the line it is called from.
func here() int {
	_, _, n, _ := runtime.Caller(1)
	return n
}

func chargePanics(*message.Message) ([]*message.Message, error) {
	panic(declinedAt(here()))
}

// A handler's panic gives the dead letter the handler's frame as its call
// site: from the *PanicError of the attempt that panicked, and, when a
// later delivery finds the budget exhausted, from the stack of the last
// attempt in the history.
func TestPanicCallSite(t *testing.T) {
	t.Parallel()
	h := leaseDedup(t, leaseStore(t), chargePanics, middleware.WithMaxAttempts(1))
	src := leaseMsg("u-1", "k-1", `{}`)
	_, err := h(src)
	var pe *middleware.PanicError
	require.ErrorAs(t, err, &pe)
	want := fmt.Sprintf("middleware_test.chargePanics (site_test.go:%d)", int(pe.Value.(declinedAt)))
	require.Equal(t, want, envelope.ErrorSite(err, nil))
	dead := dlq.Wrap(src, dlq.FailureFrom(err), nil, "", "")
	require.Equal(t, want, dead.Metadata.Get(dlq.KeyErrorSite))

	src = leaseMsg("u-2", "k-1", `{}`)
	_, err = h(src)
	fe, final := dlq.AsFinal(err)
	require.True(t, final, "exhausted: %v", err)
	require.ErrorIs(t, err, middleware.ErrExhausted)
	require.NotErrorAs(t, err, &pe, "the panic is known from the history only")
	dead = dlq.Wrap(src, dlq.FailureFrom(fe), nil, "", "")
	require.Equal(t, want, dead.Metadata.Get(dlq.KeyErrorSite))
}
