package adaptertest

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

// watermillGroup is the consumer group of the subscribers that Watermill's
// universal tests create without one.
const watermillGroup = "watermill"

// runWatermill runs Watermill's universal tests.TestPubSub with f.PubSub.
// Every test's topic is NewTopic's plus "-" and the test's ID.
func runWatermill(t *testing.T, newAdapter func(t *testing.T) Adapter, f Features) {
	base := newAdapter(t).NewTopic(t)
	wf := *f.PubSub
	wf.GenerateTopicFunc = func(tctx tests.TestContext) string { return base + "-" + string(tctx.TestID) }
	// Every Watermill test calls a constructor first, in its own
	// goroutine: that is where a test the adapter departs from is skipped.
	skip := func(t *testing.T) {
		for name, reason := range f.PubSubSkip {
			if strings.Contains(t.Name(), "/"+name+"/") {
				t.Skip(reason)
			}
		}
	}
	tests.TestPubSub(t, wf,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			skip(t)
			a := newAdapter(t)
			return a.NewPublisher(t), a.NewSubscriber(t, watermillGroup)
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			skip(t)
			a := newAdapter(t)
			return a.NewPublisher(t), a.NewSubscriber(t, group)
		},
	)
}
