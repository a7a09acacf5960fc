// Package delivery carries what a broker knows about one delivery of a
// message, and what it can do with it, from a broker adapter to surely's
// middleware. It imports no broker client.
//
// An adapter (package adapters/<broker>) puts an Info and, where the broker
// supports it, a Control into the message context before the handler chain
// runs. The middleware uses them when present:
//
//   - Retry nacks with Control.NackAfter instead of waiting in the handler,
//     when the broker can redeliver after a delay itself;
//   - Dedup calls Control.Extend together with the store's lease extension,
//     so the broker does not redeliver a message whose handler still runs.
//
// Without them (GoChannel, Kafka) the middleware falls back to waiting
// before it returns the error, and to the store's own lease.
//
// Every adapter's constructors take Option values. The options that mean
// the same in several adapters are defined here, once: WithLogger,
// WithCloseTimeout, WithConcurrency, WithAckWait and WithResendInterval.
// Each adapter checks them against its own bounds, and refuses, naming
// it, an option it does not take (another adapter's WithMarshaler, a
// Subscriber option given to a Publisher).
//
// # Metadata keys
//
// An adapter marks a message it could not decode with these keys, which
// its dead letter keeps:
//
//	surely_decode_error    KeyDecodeError: the decoding error's text
//	surely_decode_headers  KeyDecodeHeaders: the broker's raw headers, JSON
//
// # Outcomes
//
// Outcome is how one delivery ended in surely's chain, which handler.New
// and the middleware steps report to an outcome callback (OutcomeParams),
// and MissingKeyPolicy what the chain does with a message without an
// operation key. They are here, in the package of one delivery, so that a
// user of handler and a user of middleware name the same types; package
// handler names them too (handler.Outcome is Outcome).
package delivery

import (
	"context"
	"time"
)

// Info describes one delivery.
type Info struct {
	// Count is the broker's delivery count, starting at 1; 0 when the
	// broker does not report one.
	Count int
	// Redelivered is true when the broker says the message was delivered
	// before (it may be true while Count is 0).
	Redelivered bool
}

// Control is what a broker can do with one delivery besides ack and nack.
// Implementations are safe for concurrent use.
type Control interface {
	// NackAfter asks the broker to redeliver the message no sooner than d
	// after the nack that follows. It reports false when the broker cannot;
	// the caller then waits itself.
	NackAfter(d time.Duration) bool
	// Extend tells the broker that the message is still being processed,
	// pushing back its redelivery (ack wait, visibility timeout).
	Extend(ctx context.Context) error
}

type infoKey struct{}
type controlKey struct{}

// WithInfo returns ctx carrying info.
func WithInfo(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// InfoFrom returns the delivery info in ctx, if an adapter put one there.
func InfoFrom(ctx context.Context) (Info, bool) {
	i, ok := ctx.Value(infoKey{}).(Info)
	return i, ok
}

// WithControl returns ctx carrying c.
func WithControl(ctx context.Context, c Control) context.Context {
	return context.WithValue(ctx, controlKey{}, c)
}

// ControlFrom returns the delivery control in ctx, if an adapter put one there.
func ControlFrom(ctx context.Context) (Control, bool) {
	c, ok := ctx.Value(controlKey{}).(Control)
	return c, ok && c != nil
}
