package adaptertest

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// closeSlack is how much later than the close timeout Close may return: a
// subscriber that waits for the adapter's 30s default, not the close
// timeout it was given, shows by then.
const closeSlack = 10 * time.Second

// testCloseTimeout: Close gives up on a message nobody settles after
// Features.CloseTimeout (not sooner, unless the delivery ended at the ack
// wait before, and not after a default of its own), cancels its context,
// and the message goes back to the group.
func testCloseTimeout(t *testing.T, newAdapter func(*testing.T) Adapter, f Features) {
	if f.CloseTimeout <= 0 {
		t.Skip("Features.CloseTimeout is 0: the adapter's Close does not wait for messages in flight")
	}
	e := setup(t, newAdapter, f)
	sub := e.a.NewSubscriber(t, e.group)
	require.NotNil(t, sub, "NewSubscriber returned nil")
	msgs, err := sub.Subscribe(t.Context(), e.topic)
	require.NoError(t, err)
	e.publish(t, order("order-abandoned", "pay 10"))
	msg := receive(t, msgs)

	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err, "Close")
	case <-time.After(f.CloseTimeout + closeSlack):
		t.Fatalf("Close still waits for the unsettled message %v after a close timeout of %v", f.CloseTimeout+closeSlack, f.CloseTimeout)
	}
	took := time.Since(start)
	t.Logf("Close returned after %v (close timeout %v)", took.Round(time.Millisecond), f.CloseTimeout)
	// An adapter whose delivery ends at the ack wait (PostgreSQL's rolls
	// its transaction back) has nothing left to wait for after it.
	require.GreaterOrEqual(t, took, min(f.CloseTimeout, f.AckWait), "Close gave up on the message before the close timeout")
	require.Error(t, msg.Context().Err(), "the abandoned message's context is cancelled")
	drained := make(chan struct{})
	go func() {
		for range msgs { // closed once the subscription ended
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(waitTimeout):
		t.Fatal("the subscription's channel is still open after Close")
	}

	// The broker hands the message out again, to another subscriber.
	next := e.a.NewSubscriber(t, e.group)
	require.NotNil(t, next, "NewSubscriber returned nil")
	t.Cleanup(func() { require.NoError(t, next.Close(), "subscriber Close") })
	again, err := next.Subscribe(t.Context(), e.topic)
	require.NoError(t, err)
	m := receive(t, again)
	require.Equal(t, msg.UUID, m.UUID, "another message than the abandoned one")
	m.Ack()
}

// receive returns the next message of msgs, failing the test after
// waitTimeout (AckWait and the broker's redelivery included).
func receive(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		require.True(t, ok, "the subscription ended")
		return m
	case <-time.After(waitTimeout + 2*time.Second):
		t.Fatalf("no message within %v", waitTimeout)
		return nil
	}
}
