package gochannel_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/adapters/adaptertest"
	surelygochannel "github.com/surely-dev/surely/adapters/gochannel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// adapter serves the suite from one GoChannel per test: publisher and
// subscribers are the same instance, as GoChannel requires.
type adapter struct{ ps *gochannel.GoChannel }

func newAdapter(t *testing.T) adaptertest.Adapter {
	ps := surelygochannel.New(nil)
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
