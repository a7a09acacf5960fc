package archivetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// Bench measures an archive: Publish of one envelope, Get, a List page of
// 100 over everything, a List page of a filter that selects one entry in
// ten, and Stats, on an archive holding size entries. newArchive returns an
// empty archive.
func Bench(b *testing.B, size int, newArchive func(b *testing.B) archive.Archive) {
	b.Helper()
	b.Run("Publish", func(b *testing.B) {
		a := newArchive(b)
		i := 0
		for b.Loop() {
			m := envelope(letter{source: fmt.Sprintf("bench-%d", i), reason: dlq.ReasonExhausted, topic: "orders", at: base, payload: make([]byte, 256)})
			i++
			if err := a.Publish("dead", m); err != nil {
				b.Fatal(err)
			}
		}
	})
	a := newArchive(b)
	for start := 0; start < size; start += 100 {
		var batch []*message.Message
		for i := start; i < min(start+100, size); i++ {
			topic := "orders"
			if i%10 == 0 {
				topic = "payments"
			}
			batch = append(batch, envelope(letter{source: fmt.Sprintf("fill-%d", i), reason: dlq.ReasonExhausted, topic: topic,
				at: base.Add(time.Duration(i) * time.Second), payload: make([]byte, 256)}))
		}
		require.NoError(b, a.Publish("dead", batch...))
	}
	ctx := b.Context()
	id := envelope(letter{source: "fill-7"}).UUID
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.Get(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListPage100", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.List(ctx, archive.Filter{}, archive.Page{Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListFilteredPage100", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.List(ctx, archive.Filter{Topic: "payments"}, archive.Page{Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Stats", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.Stats(ctx, archive.Filter{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
