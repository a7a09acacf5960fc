package outbox_test

import (
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/internal/faults"
)

// panicky is a destination publisher that panics on its first n
// publishes, then publishes.
type panicky struct {
	*faults.Publisher
	mu sync.Mutex
	n  int
}

func (p *panicky) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	boom := p.n > 0
	p.n--
	p.mu.Unlock()
	if boom {
		panic("broker client: nil connection")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestPanickingDestinationIsRetriedNotLost: a destination publisher that
// panics is contained like one that fails: the forwarder keeps running,
// tries the event again after its retry interval, and forwards it once
// the publisher works. An outbox has no dead letter: a committed event is
// never dropped.
func TestPanickingDestinationIsRetriedNotLost(t *testing.T) {
	e := setup(t)
	pub := &panicky{Publisher: faults.NewPublisher(0), n: 3}
	forward(t, e.ob, pub)
	h := e.chain(t, e.pay)
	_, err := h(delivery("order-1"))
	require.NoError(t, err)
	got := waitEvents(t, pub.Publisher, 1)
	require.Len(t, got, 1, "forwarded once, after three panics")
	requireSameEvent(t, e.event(t, "order-1"), got[0])
	require.Eventually(t, func() bool { return pending(t, e.ob) == 0 }, waitFor, tick)
	// The forwarder still runs: the next event goes through at once.
	e.barrier(t, h, pub.Publisher)
}
