package middleware

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// storeCall is the context of one store call (see dedup.bound); call stop
// when the call returned.
type storeCall struct {
	ctx    context.Context
	cancel context.CancelFunc // a plain context.WithDeadline's, or nil
	lazy   *boundedCtx        // else
}

func (c storeCall) stop() {
	if c.cancel != nil {
		c.cancel()
	} else {
		c.lazy.stop()
	}
}

// boundCall returns the context of a store call: parent's values and
// cancellation, bounded by d. As long as no store call has waited on Done
// (waits false), it is a boundedCtx, which makes no timer for a store that
// only checks Err (memstore); the first call to Done sets waits, and from
// then on every call gets a plain context.WithDeadline: a store that waits
// on Done on every call (go-redis selects on it before each command,
// database/sql too) would pay for a boundedCtx and for the timer it makes.
func boundCall(parent context.Context, d time.Duration, waits *atomic.Bool) storeCall {
	if waits.Load() {
		ctx, cancel := context.WithTimeout(parent, d)
		return storeCall{ctx: ctx, cancel: cancel}
	}
	c := newBoundedCtx(parent, d)
	c.waits = waits
	return storeCall{ctx: c, lazy: c}
}

// boundedCtx is the context of one store call: its parent's values and
// cancellation, and a deadline. It costs one allocation. The timer behind
// Done (a context.WithDeadline of the parent) is made only when something
// asks for Done: a store that only checks Err (memstore) or only reads
// Deadline pays for no timer; Err compares the clock with the deadline.
// A call to Done also sets waits, when set (see boundCall).
//
// Once made, that context answers Done, Err and Value, so context.Cause
// and contexts derived from this one find its standard *cancelCtx (no
// goroutine per derived context). Before it is made, Value asks the
// parent.
type boundedCtx struct {
	parent   context.Context
	deadline time.Time
	waits    *atomic.Bool // set by Done; may be nil

	made   atomic.Value // context.Context, set once under mu by Done
	mu     sync.Mutex
	cancel context.CancelFunc // the made context's; under mu
}

func newBoundedCtx(parent context.Context, d time.Duration) *boundedCtx {
	dl := time.Now().Add(d)
	if pd, ok := parent.Deadline(); ok && pd.Before(dl) {
		dl = pd
	}
	return &boundedCtx{parent: parent, deadline: dl}
}

func (c *boundedCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *boundedCtx) Done() <-chan struct{} {
	if c.waits != nil && !c.waits.Load() {
		c.waits.Store(true)
	}
	return c.make().Done()
}

func (c *boundedCtx) Err() error {
	if m := c.loaded(); m != nil {
		return m.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *boundedCtx) Value(key any) any {
	if m := c.loaded(); m != nil {
		return m.Value(key)
	}
	return c.parent.Value(key)
}

// loaded returns the made context, or nil.
func (c *boundedCtx) loaded() context.Context {
	m, _ := c.made.Load().(context.Context)
	return m
}

// make returns the made context, making it first if needed.
func (c *boundedCtx) make() context.Context {
	if m := c.loaded(); m != nil {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.loaded(); m != nil {
		return m
	}
	m, cancel := context.WithDeadline(c.parent, c.deadline)
	c.cancel = cancel
	c.made.Store(m)
	return m
}

// stop releases the timer, if one was made. The call that used c has
// returned.
func (c *boundedCtx) stop() {
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
