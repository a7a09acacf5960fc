package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
)

// printer is a publisher that prints what it gets.
type printer struct{}

func (printer) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		fmt.Printf("publish to %s: uuid=%s key=%s replay_of_set=%v\n", topic, m.UUID,
			m.Metadata.Get(idempotency.DefaultMetadataKey), m.Metadata.Get(dlq.KeyReplayOf) != "")
	}
	return nil
}

func (printer) Close() error { return nil }

// Replay the exhausted dead letters of a topic at 100 messages per second,
// refusing those older than the dedup retention.
func ExampleRun() {
	ctx := context.Background()
	arch, _ := memarchive.New()
	for i, age := range []time.Duration{48 * time.Hour, time.Minute} {
		src := message.NewMessage(fmt.Sprintf("order-%d", i), []byte(`{"sku":"A-1"}`))
		src.Metadata.Set(idempotency.DefaultMetadataKey, fmt.Sprintf("reserve-%d", i))
		_ = arch.Publish("dead-letters", dlq.Wrap(src, dlq.Failure{
			Reason: dlq.ReasonExhausted, Err: errors.New("warehouse API down"), Attempts: 5,
			Topic: "orders", Retention: 24 * time.Hour, At: time.Now().Add(-age),
		}, nil, "", ""))
	}

	res, err := replay.Run(ctx, arch, printer{},
		archive.Filter{Reason: dlq.ReasonExhausted, Topic: "orders"},
		replay.WithID("replay-2026-11-30"),
		replay.WithRate(100),
		replay.WithProgress(func(p replay.Progress) {
			if p.Action == replay.ActionRefused {
				fmt.Println("refused:", p.Reason[:strings.Index(p.Reason, ",")])
			}
		}))
	fmt.Println(err, res.State, "replayed:", res.Replayed, "refused:", res.Refused)
	// Output:
	// refused: dead-lettered 48h0m0s ago
	// publish to orders: uuid=order-1 key=reserve-1 replay_of_set=true
	// <nil> done replayed: 1 refused: 1
}
