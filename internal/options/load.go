package options

import (
	"cmp"
	"fmt"
)

// Load applies opts, as Apply does, and refuses, as Check does, an option
// not among used: the first step of a constructor. who names the
// constructor in the message ("amqp.NewSubscriber").
//
// Within a family, an option's name says what it means: the options of
// one package that no other package has (an adapter's WithMarshaler,
// whose value is of its broker's type) record under a name qualified with
// the package ("amqp.WithMarshaler"), so that another package's option of
// the same Go name is refused by name, as an option the constructor does
// not take; the options a family defines once record under their plain
// name ("WithAckWait").
func Load[O applier](invalid error, who string, opts []O, used ...string) (*Set, error) {
	s, err := Apply(invalid, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(invalid, who, used...); err != nil {
		return nil, err
	}
	return s, nil
}

// PutNotNil records v under name; a nil v (a nil pointer, interface or
// map) is an error wrapping invalid that names the option.
func PutNotNil[T comparable](s *Set, invalid error, name string, v T) error {
	var zero T
	if v == zero {
		return fmt.Errorf("%w: %s: nil", invalid, name)
	}
	s.Put(name, v)
	return nil
}

// Within returns the value option name recorded, or def (unchecked) when
// it was not applied. A recorded value outside lo..hi is an error wrapping invalid that names
// who and the option: an option a family defines once (delivery.WithAckWait)
// checks only what holds everywhere, and each constructor that takes it
// checks its own bounds with Within or AtLeast.
func Within[T cmp.Ordered](s *Set, invalid error, who, name string, def, lo, hi T) (T, error) {
	v := Get(s, name, def)
	if s.Has(name) && (v < lo || v > hi) {
		return def, fmt.Errorf("%w: %s: %s(%v) is not in %v..%v", invalid, who, name, v, lo, hi)
	}
	return v, nil
}

// AtLeast is Within without an upper bound.
func AtLeast[T cmp.Ordered](s *Set, invalid error, who, name string, def, lo T) (T, error) {
	v := Get(s, name, def)
	if s.Has(name) && v < lo {
		return def, fmt.Errorf("%w: %s: %s(%v) is below %v", invalid, who, name, v, lo)
	}
	return v, nil
}
