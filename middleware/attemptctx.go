package middleware

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// attemptCtx is a handler's context for one attempt: the message context's
// values and deadline; canceled with a cause by cancel (a hung handler),
// and with the message context, but only while the handler runs: after
// stop, messages the handler produced with it stay publishable.
//
// It costs one allocation. The context behind Done, Err and Cause, a
// context.WithCancelCause of the message context's values (with the
// link that forwards the message context's cancellation), is made only
// when something needs it: a call to Done (a select, a derived
// context, context.AfterFunc) or a cancellation. A handler that never
// waits on its context pays for none of it; Err alone checks the message
// context instead.
//
// Once made, that context answers Done, Err and Value (so
// context.Cause, and contexts derived from this one, find a standard
// *cancelCtx whose Done channel is this context's: no goroutine per
// derived context). Before it is made, context.Cause never looks for one:
// Cause asks Err first, and Err is nil until the context is made. After
// stop, a context that was not made can no longer be canceled: Done
// returns nil.
type attemptCtx struct {
	msg     context.Context
	made    atomic.Value // context.Context, a *context.cancelCtx: set once, under mu
	running atomic.Bool  // the handler runs; cleared by stop, under mu

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the made context's; under mu
	unlink func() bool             // stops forwarding msg's cancellation; under mu
}

func newAttemptCtx(msg context.Context) *attemptCtx {
	a := &attemptCtx{msg: msg}
	a.running.Store(true)
	return a
}

func (a *attemptCtx) Deadline() (time.Time, bool) { return a.msg.Deadline() }

func (a *attemptCtx) Done() <-chan struct{} {
	c, live := a.state()
	if c == nil && !live {
		return nil
	}
	if c == nil {
		c = a.make()
	}
	return c.Done()
}

func (a *attemptCtx) Err() error {
	c, live := a.state()
	if c == nil && (!live || a.msg.Err() == nil) {
		return nil
	}
	if c == nil {
		c = a.make()
	}
	if err := c.Err(); err != nil || !a.running.Load() || a.msg.Err() == nil {
		return err
	}
	// The message context is canceled, and the callback that forwards it
	// has not run yet (context.AfterFunc runs it on its own goroutine):
	// cancel now, so Err agrees with the message context at once, as a
	// standard child context's does.
	a.mu.Lock()
	if a.running.Load() {
		a.cancel(context.Cause(a.msg))
	}
	a.mu.Unlock()
	return c.Err()
}

func (a *attemptCtx) Value(key any) any {
	if c := a.loaded(); c != nil {
		return c.Value(key)
	}
	return a.msg.Value(key)
}

// loaded returns the made context, or nil.
func (a *attemptCtx) loaded() context.Context {
	c, _ := a.made.Load().(context.Context)
	return c
}

// state returns the made context, or nil and whether the handler still
// runs. The made context is stored before running is cleared, so nil and
// false mean a context that will never be made by stop.
func (a *attemptCtx) state() (made context.Context, live bool) {
	if c := a.loaded(); c != nil {
		return c, false
	}
	if a.running.Load() {
		return nil, true
	}
	return a.loaded(), false
}

// make returns the made context, making it first if needed.
func (a *attemptCtx) make() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.makeLocked()
}

func (a *attemptCtx) makeLocked() context.Context {
	if c := a.loaded(); c != nil {
		return c
	}
	c, cancel := context.WithCancelCause(attemptValues{a})
	a.cancel = cancel
	if a.running.Load() {
		msg := a.msg
		if msg.Err() != nil {
			cancel(context.Cause(msg))
		} else if msg.Done() != nil {
			a.unlink = context.AfterFunc(msg, func() { cancel(context.Cause(msg)) })
		}
	}
	a.made.Store(c)
	return c
}

// hang cancels the context with cause (ErrHandlerHung, or
// idempotency.ErrLeaseLost). The caller calls it only while the handler
// runs.
func (a *attemptCtx) hang(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.makeLocked()
	a.cancel(cause)
}

// stop ends the forwarding of the message context's cancellation: a
// message context canceled before stop has canceled this one when stop
// returns; one canceled later no longer does.
func (a *attemptCtx) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.loaded() == nil:
		if a.msg.Err() != nil {
			a.makeLocked()
		}
	case a.unlink != nil && !a.unlink():
		// The message context was canceled: the forwarding callback has
		// started, or is about to. Cancel now (the same cause) so the
		// attempt's outcome does not depend on when it runs.
		a.cancel(context.Cause(a.msg))
	}
	a.unlink = nil
	a.running.Store(false)
}

// cause returns context.Cause of the context (nil when not canceled).
func (a *attemptCtx) cause() error {
	if c := a.loaded(); c != nil {
		return context.Cause(c)
	}
	return nil
}

// attemptValues is the parent of an attemptCtx's made context: the message
// context's values and deadline, never canceled. The made context answers
// context.Cause's lookup itself, so the message context's own cancelCtx
// is never found through it. A struct of one pointer: converting it to a
// context.Context does not allocate.
type attemptValues struct{ a *attemptCtx }

func (v attemptValues) Deadline() (time.Time, bool) { return v.a.msg.Deadline() }
func (v attemptValues) Done() <-chan struct{}       { return nil }
func (v attemptValues) Err() error                  { return nil }
func (v attemptValues) Value(key any) any           { return v.a.msg.Value(key) }
