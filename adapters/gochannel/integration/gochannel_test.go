// Package integration_test runs the conformance suite (adapters/adaptertest)
// on adapters/gochannel. It lives apart from the adapter's own tests
// because the suite links a SQLite driver for its default shared store: "go
// mod tidy" in a module that imports adapters/gochannel loads the adapter's
// tests and records every module they import in that module's go.sum, but
// never loads this package (nothing imports it). internal/tidycheck checks
// it.
package integration_test

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
