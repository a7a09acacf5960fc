package gochannel_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	surelygochannel "github.com/surely-dev/surely/adapters/gochannel"
	"github.com/surely-dev/surely/delivery"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestOptions(t *testing.T) {
	t.Parallel()
	_, err := surelygochannel.New(delivery.WithCloseTimeout(time.Second))
	require.ErrorIs(t, err, delivery.ErrInvalidOption, "GoChannel's Close waits for nothing it could bound")
	require.ErrorContains(t, err, "gochannel.New does not take option WithCloseTimeout")
	_, err = surelygochannel.New(delivery.WithLogger(nil))
	require.ErrorIs(t, err, delivery.ErrInvalidOption)

	ps, err := surelygochannel.New(delivery.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer func() { require.NoError(t, ps.Close()) }()
	// Persistent: a message published before anything subscribed is kept.
	require.NoError(t, ps.Publish("early", message.NewMessage("m-1", []byte("x"))))
	ch, err := ps.Subscribe(t.Context(), "early")
	require.NoError(t, err)
	select {
	case m := <-ch:
		require.Equal(t, "m-1", m.UUID)
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("the message published before the subscription was dropped")
	}
}
