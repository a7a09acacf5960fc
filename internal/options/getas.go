package options

import (
	"fmt"
	"reflect"
)

// GetAs is Get for an option whose name several packages of a family share
// with different value types (each adapter's WithMarshaler takes its own
// broker's marshaler): a value of another type, recorded by another
// package's option, is an error wrapping invalid instead of a panic. who
// names the constructor in the message.
func GetAs[T any](s *Set, invalid error, who, name string, def T) (T, error) {
	v, ok := s.values[name]
	if !ok {
		return def, nil
	}
	t, ok := v.(T)
	if !ok {
		return def, fmt.Errorf("%w: %s: option %s holds a %T, not a %v (an option of another package?)", invalid, who, name, v, reflect.TypeFor[T]())
	}
	return t, nil
}
