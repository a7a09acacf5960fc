package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a stderr written by the watch goroutine and read by the
// test; wrote is closed by the first write.
type lockedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	wrote chan struct{}
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{wrote: make(chan struct{})} }

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.once.Do(func() { close(b.wrote) })
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNoInterruptMessageAfterNormalEnd: a command that ends by itself never
// prints "interrupted" (the watch used to see the context that finish
// cancels, and to pick it at random over the finished signal: about one
// run in 15 of the binary). synctest.Wait lets the watch goroutine run to
// its end before the buffer is read.
func TestNoInterruptMessageAfterNormalEnd(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for i := range 500 {
			ctx, stop := context.WithCancel(context.Background())
			stderr := newLockedBuffer()
			finish := watchInterrupt(ctx, stop, stderr)
			finish()
			synctest.Wait()
			require.Empty(t, stderr.String(), "run %d: interrupt message after a normal end", i)
			require.Error(t, ctx.Err(), "finish stops the signal context")
		}
	})
}

// TestInterruptMessage: a real interrupt (the signal context ends while the
// command runs) is announced once.
func TestInterruptMessage(t *testing.T) {
	t.Parallel()
	ctx, interrupt := context.WithCancel(context.Background())
	stderr := newLockedBuffer()
	finish := watchInterrupt(ctx, interrupt, stderr)
	interrupt()
	<-stderr.wrote
	finish()
	assert.Equal(t, "surely: interrupted, stopping cleanly (Ctrl-C again to quit at once)\n", stderr.String())
}
