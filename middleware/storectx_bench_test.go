package middleware

import (
	"context"
	"testing"
	"time"
)

// BenchmarkStoreCtx compares the lazy boundedCtx with a plain
// context.WithDeadline for a store call that waits on Done (go-redis,
// database/sql) and for one that only checks Err (memstore): boundCall
// picks the first for a store that never waited, the second afterwards.
func BenchmarkStoreCtx(b *testing.B) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), attemptKey{}, "v"))
	defer cancel()
	for _, p := range []struct {
		name string
		ctx  context.Context
	}{{"attached", parent}, {"detached", context.WithoutCancel(parent)}} {
		b.Run(p.name+"/bounded/done", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c := newBoundedCtx(p.ctx, time.Second)
				select {
				case <-c.Done():
				default:
				}
				c.stop()
			}
		})
		b.Run(p.name+"/deadline/done", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c, stop := context.WithDeadline(p.ctx, time.Now().Add(time.Second))
				select {
				case <-c.Done():
				default:
				}
				stop()
			}
		})
		b.Run(p.name+"/bounded/err", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c := newBoundedCtx(p.ctx, time.Second)
				_ = c.Err()
				c.stop()
			}
		})
		b.Run(p.name+"/deadline/err", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c, stop := context.WithDeadline(p.ctx, time.Now().Add(time.Second))
				_ = c.Err()
				stop()
			}
		})
	}
}
