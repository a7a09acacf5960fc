package options

import (
	"fmt"
	"log/slog"
	"time"
)

// The checks the options of every family share. Each records its value
// under name when it is valid, and otherwise returns an error wrapping
// invalid, the family's ErrInvalidOption.

// PutLogger records a logger under Logger; nil is invalid.
func (s *Set) PutLogger(invalid error, l *slog.Logger) error {
	if l == nil {
		return fmt.Errorf("%w: nil logger", invalid)
	}
	s.Put(Logger, l)
	return nil
}

// PutClock records a time source under Clock; nil is invalid.
func (s *Set) PutClock(invalid error, now func() time.Time) error {
	if now == nil {
		return fmt.Errorf("%w: nil clock", invalid)
	}
	s.Put(Clock, now)
	return nil
}

// PutPositive records d under name; what names it in the error when d is
// not positive.
func (s *Set) PutPositive(invalid error, name, what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s must be positive, got %v", invalid, what, d)
	}
	s.Put(name, d)
	return nil
}

// PutAtLeast records d under name; what names it in the error when d is
// below lowest.
func (s *Set) PutAtLeast(invalid error, name, what string, d, lowest time.Duration) error {
	if d < lowest {
		return fmt.Errorf("%w: %s must be at least %v, got %v", invalid, what, lowest, d)
	}
	s.Put(name, d)
	return nil
}
