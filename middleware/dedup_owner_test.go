package middleware_test

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// thisProcess is the owner the dedup step gives its claims: "host/pid".
func thisProcess(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	return host + "/" + strconv.Itoa(os.Getpid())
}

// Every attempt the dedup step runs names this process in the history, so
// that a console can tell which process ran it; the dead letter's history
// carries it.
func TestDedupHistoryNamesTheProcess(t *testing.T) {
	t.Parallel()
	owner := thisProcess(t)
	store := leaseStore(t)
	boom := errors.New("card declined")
	h := leaseDedup(t, store, func(msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "fail" {
			return nil, retry.Permanent(boom)
		}
		return nil, nil
	})

	_, err := h(leaseMsg("u-1", "k-1", "ok"))
	require.NoError(t, err)
	rec, err := store.Get(t.Context(), leaseNS, "k-1")
	require.NoError(t, err)
	require.Len(t, rec.History, 1)
	require.Equal(t, owner, rec.History[0].Owner)

	_, err = h(leaseMsg("u-2", "k-2", "fail"))
	fe, ok := dlq.AsFinal(err)
	require.True(t, ok, "a permanent failure is final: %v", err)
	require.Len(t, fe.History, 1)
	require.Equal(t, owner, fe.History[0].Owner, "the dead letter's history")

	// A keyless message's attempt record too.
	kl := keylessChain(t, store, func(*message.Message) ([]*message.Message, error) { return nil, nil })
	_, err = kl(message.NewMessage("u-3", []byte(`{}`)))
	require.NoError(t, err)
	rec, err = store.Get(t.Context(), middleware.KeylessNamespace, "kl/u-3")
	require.NoError(t, err)
	require.Len(t, rec.History, 1)
	require.Equal(t, owner, rec.History[0].Owner)
	require.NotEqual(t, idempotency.StateDone, rec.State)
}
