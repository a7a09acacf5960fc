package gochannel_test

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelygochannel "github.com/surely-dev/surely/adapters/gochannel"
	"github.com/surely-dev/surely/delivery"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// adapter serves the suite from one GoChannel per test: publisher and
// subscribers are the same instance, as GoChannel requires.
type adapter struct{ ps *gochannel.GoChannel }

func newAdapter(t *testing.T) adaptertest.Adapter {
	ps, err := surelygochannel.New()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	return adapter{ps: ps}
}

func (a adapter) NewTopic(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "orders-" + hex.EncodeToString(b)
}

func (a adapter) NewPublisher(*testing.T) message.Publisher { return a.ps }

func (a adapter) NewSubscriber(*testing.T, string) message.Subscriber { return a.ps }

func (a adapter) PublishMalformed(t *testing.T, _ string) []byte {
	t.Fatal("GoChannel carries Go values: nothing to malform")
	return nil
}

func (a adapter) ChildEnv() []string { return nil }

func TestConformance(t *testing.T) {
	adaptertest.Run(t, newAdapter, adaptertest.Features{
		NoCrashRecovery:  true,
		NoConsumerGroups: true,
		NoMalformed:      true,
		PubSub: &tests.Features{
			ConsumerGroups:        false,
			ExactlyOnceDelivery:   true,
			GuaranteedOrder:       false,
			Persistent:            false,
			RequireSingleInstance: true,
		},
	})
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
