package middleware

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The redelivery wait of an InProgressError is the store's Wait when it
// gave one, else Until on this process's clock.
func TestInProgressErrorWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		until := time.Now().Add(5 * time.Second)
		require.Equal(t, 2*time.Second, (&InProgressError{Until: until, Wait: 2 * time.Second}).wait())
		require.Equal(t, 5*time.Second, (&InProgressError{Until: until}).wait())
	})
}

// A PanicError names the handler unless Where names another callback.
func TestPanicErrorText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "surely: handler panicked: boom", (&PanicError{Value: "boom"}).Error())
	require.Equal(t, "surely: key source panicked: boom", (&PanicError{Value: "boom", Where: "key source"}).Error())
}
