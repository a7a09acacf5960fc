package propagate

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

// KeyPublishedAt is the metadata entry holding the time of a message's first
// publish (RFC 3339, nanoseconds, UTC). The consumer's metrics measure
// end-to-end latency from it.
const KeyPublishedAt = "surely_published_at"

// ErrInvalidOption wraps every option error of this package.
var ErrInvalidOption = errors.New("propagate: invalid option")

// ErrInvalidKey wraps the error of a message whose operation key (found in
// its metadata or made by the key function) is unusable; the message is not
// published.
var ErrInvalidKey = errors.New("propagate: invalid operation key")

// uuidKey is the default key function: the message UUID.
func uuidKey(msg *message.Message) (string, error) { return msg.UUID, nil }

// Publisher stamps the operation key, the trace context and the publish
// time into each message's metadata, then publishes through the wrapped
// publisher. It is safe for concurrent use when the wrapped publisher is.
type Publisher struct {
	pub   message.Publisher
	field string
	key   func(*message.Message) (string, error)
	prop  propagation.TextMapPropagator
	now   func() time.Time
	// fields are prop's Fields, asked once: a TextMapPropagator's
	// fields do not change, and asking allocates.
	fields []string
}

// Option configures a Publisher. Only the With functions of this package
// make one.
type Option interface{ apply(*Publisher) error }

// optionFunc is an Option made of a function.
type optionFunc func(*Publisher) error

func (f optionFunc) apply(p *Publisher) error { return f(p) }

// WithKeyMetadata sets the metadata entry of the operation key (default
// idempotency.DefaultMetadataKey, "idempotency_key"). It must match the
// consumer's extractor.
func WithKeyMetadata(name string) Option {
	return optionFunc(func(p *Publisher) error {
		if name == "" {
			return fmt.Errorf("%w: empty key metadata name", ErrInvalidOption)
		}
		p.field = name
		return nil
	})
}

// WithKey sets how the key of a message without one is made (default: the
// message UUID). Derive it from the message (its UUID, a business identifier in
// the payload), never from the time or a random source, so that a copy
// gets the same key.
func WithKey(fn func(msg *message.Message) (string, error)) Option {
	return optionFunc(func(p *Publisher) error {
		if fn == nil {
			return fmt.Errorf("%w: nil key function", ErrInvalidOption)
		}
		p.key = fn
		return nil
	})
}

// WithPropagator sets how the trace context is written (default
// propagation.TraceContext{}, W3C traceparent and tracestate). The
// consumer must use the same one.
func WithPropagator(prop propagation.TextMapPropagator) Option {
	return optionFunc(func(p *Publisher) error {
		if prop == nil {
			return fmt.Errorf("%w: nil propagator", ErrInvalidOption)
		}
		p.prop = prop
		return nil
	})
}

// WithClock sets the clock of KeyPublishedAt (default time.Now).
func WithClock(now func() time.Time) Option {
	return optionFunc(func(p *Publisher) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		p.now = now
		return nil
	})
}

// NewPublisher wraps pub. surely never closes pub: Close on the returned
// Publisher does nothing, the caller closes pub.
func NewPublisher(pub message.Publisher, opts ...Option) (*Publisher, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: nil publisher", ErrInvalidOption)
	}
	p := &Publisher{
		pub: pub, field: idempotency.DefaultMetadataKey, key: uuidKey,
		prop: propagation.TraceContext{}, now: time.Now,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(p); err != nil {
			return nil, err
		}
	}
	p.fields = p.prop.Fields()
	return p, nil
}

// Stamp writes into msg's metadata what Publish writes, without publishing:
// the operation key, the trace context of msg.Context() and the publish
// time, each only when missing. It fails, changing nothing, when the key
// is unusable.
func (p *Publisher) Stamp(msg *message.Message) error {
	if msg == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidKey)
	}
	key := msg.Metadata.Get(p.field)
	if key == "" {
		var err error
		if key, err = p.key(msg); err != nil {
			return fmt.Errorf("%w: message %q: %w", ErrInvalidKey, msg.UUID, err)
		}
	}
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: message %q, %s: %w", ErrInvalidKey, msg.UUID, p.field, err)
	}
	if msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	msg.Metadata.Set(p.field, key)
	if !p.hasTraceContext(msg.Metadata) {
		p.prop.Inject(msg.Context(), propagation.MapCarrier(msg.Metadata))
	}
	if msg.Metadata.Get(KeyPublishedAt) == "" {
		msg.Metadata.Set(KeyPublishedAt, p.now().UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// hasTraceContext reports whether any field of the propagator is set, so a
// retried publish keeps the creation context of its first try.
func (p *Publisher) hasTraceContext(md message.Metadata) bool {
	for _, f := range p.fields {
		if md.Get(f) != "" {
			return true
		}
	}
	return false
}

// Publish stamps every message (see Stamp) and publishes them to topic. If
// a message cannot be stamped, nothing is published and the error says
// which message.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if err := p.Stamp(m); err != nil {
			return err
		}
	}
	return p.pub.Publish(topic, msgs...)
}

// Close does nothing: the wrapped publisher belongs to the caller.
func (p *Publisher) Close() error { return nil }
