// Package options holds the settings behind surely's option families.
//
// The module has one configuration rule (docs/API.md): a constructor takes
// its required inputs as arguments and everything optional as functional
// options, and packages that configure the same kind of thing share one
// Option type, defined in the family's public package as
//
//	type Option interface{ option }
//	type option = options.Option[options.Delivery]
//
// (delivery.Option for the adapters, for example): "go doc" shows an
// interface with unexported methods, which only the With functions of the
// family's packages make, as Func[F] values. The tag F keeps families
// apart: a delivery.Option is not an idempotency.Option. An option records its
// value in the Set under its own name ("WithLogger"); one name means one
// thing across the family, so the common options are defined once. A
// constructor reads the values it uses with Get and rejects, with Check,
// any option it does not use: an option that does not apply is a
// configuration error, never silently ignored.
package options

import (
	"fmt"
	"slices"
)

// Names of the options that mean the same in every family.
const (
	Logger         = "WithLogger"         // *slog.Logger
	Clock          = "WithClock"          // func() time.Time
	CloseTimeout   = "WithCloseTimeout"   // time.Duration
	MeterProvider  = "WithMeterProvider"  // metric.MeterProvider
	TracerProvider = "WithTracerProvider" // trace.TracerProvider
)

// Names of options that a package other than their own reads: the
// console takes dlq.WithRedactor and four replay options as they are, and
// passes them on.
const (
	Redactor               = "WithRedactor"                // func(string) string
	ReplayStore            = "replay.WithStore"            // idempotency.Store
	ReplayDefaultRetention = "replay.WithDefaultRetention" // time.Duration
	ReplayConcurrency      = "replay.WithConcurrency"      // int
	ReplayAbortAfter       = "replay.WithAbortAfter"       // int
)

// Option is an option of family F. A family's public Option type embeds
// it through an unexported alias, so that its methods, and with them the
// Set, are hidden from the family's users.
type Option[F any] interface {
	apply(*Set) error
	family(F)
}

// Func is an option of family F made of a function: the one implementation
// of Option. A With function returns Func[F](func(s *Set) error {...}).
type Func[F any] func(*Set) error

func (f Func[F]) apply(s *Set) error { return f(s) }

func (Func[F]) family(F) {}

// Delivery is the family tag of delivery.Option (the adapters).
type Delivery struct{}

// DLQ is the family tag of dlq.Option (dlq, the archives, replay, console).
type DLQ struct{}

// Idempotency is the family tag of idempotency.Option (the extractor and
// the stores).
type Idempotency struct{}

// Middleware is the family tag of middleware.Option.
type Middleware struct{}

// Outbox is the family tag of outbox.Option.
type Outbox struct{}

// Retry is the family tag of retry.Option.
type Retry struct{}

// applier is what Apply and Load take: any family's Option.
type applier interface{ apply(*Set) error }

// Set is the settings a list of options recorded: values by option name,
// and the names in the order they were applied.
type Set struct {
	names  []string
	values map[string]any
}

// Put records option name with value v; a later Put of the same name wins.
func (s *Set) Put(name string, v any) {
	if s.values == nil {
		s.values = make(map[string]any)
	}
	if _, ok := s.values[name]; !ok {
		s.names = append(s.names, name)
	}
	s.values[name] = v
}

// Has reports whether option name was applied.
func (s *Set) Has(name string) bool {
	_, ok := s.values[name]
	return ok
}

// Get returns the value option name recorded, or def when it was not
// applied.
func Get[T any](s *Set, name string, def T) T {
	v, ok := s.values[name]
	if !ok {
		return def
	}
	return v.(T)
}

// Check returns an error wrapping invalid when an option not among used
// was applied; who names the constructor in the message.
func (s *Set) Check(invalid error, who string, used ...string) error {
	for _, n := range s.names {
		if !slices.Contains(used, n) {
			return fmt.Errorf("%w: %s does not take option %s", invalid, who, n)
		}
	}
	return nil
}

// Apply applies opts, in order, to a new Set. A nil option is an error
// wrapping invalid (the family's ErrInvalidOption); an option's own error
// is returned as it is (the option wraps invalid itself).
func Apply[O applier](invalid error, opts []O) (*Set, error) {
	s := &Set{}
	for _, o := range opts {
		if any(o) == nil {
			return nil, fmt.Errorf("%w: nil option", invalid)
		}
		if err := o.apply(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
