package propagate_test

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/surely-dev/surely/propagate"
)

// A producer wraps its publisher once; every message then carries its
// operation key, its trace context and its publish time. A retried publish
// reuses the message, so the consumer sees one operation.
func ExampleNewPublisher() {
	ps := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer func() { _ = ps.Close() }()
	pub, err := propagate.NewPublisher(ps, propagate.WithClock(func() time.Time {
		return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	}))
	if err != nil {
		panic(err)
	}
	msg := message.NewMessage("3f0c1a52-7b7e-4d7c-a2a8-8f7e6c1d2b90", []byte(`{"order":42}`))
	for range 2 { // the same message, published twice, keeps its key
		if err := pub.Publish("orders", msg); err != nil {
			panic(err)
		}
	}
	fmt.Println(msg.Metadata.Get("idempotency_key"))
	fmt.Println(msg.Metadata.Get(propagate.KeyPublishedAt))
	// Output:
	// 3f0c1a52-7b7e-4d7c-a2a8-8f7e6c1d2b90
	// 2026-11-30T09:00:00Z
}
