package integration_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// BenchmarkPublishConsume publishes b.N messages one by one, then consumes
// and acks them with one subscriber, on the in-process emulator.
func BenchmarkPublishConsume(b *testing.B) {
	a := newAdapter()
	topic := "surely_bench_" + randomName(b)
	require.NoError(b, a.ensure(b.Context(), topic))
	pub, sub := newPublisher(b), newSubscriber(b)
	msgs, err := sub.Subscribe(b.Context(), topic)
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		require.NoError(b, pub.Publish(topic, message.NewMessage("m", []byte("x"))))
	}
	published := b.Elapsed()
	for range b.N {
		m := <-msgs
		m.Ack()
	}
	b.ReportMetric(float64(b.N)/published.Seconds(), "publish/s")
	b.ReportMetric(float64(b.N)/(b.Elapsed()-published).Seconds(), "consume/s")
}
