package options

import (
	"errors"
	"strings"
	"testing"
)

var errInvalid = errors.New("x: invalid option")

type option func(*Set) error

func with(name string, v any) option {
	return func(s *Set) error { s.Put(name, v); return nil }
}

func TestApplyGetCheck(t *testing.T) {
	s, err := Apply(errInvalid, []option{with("WithA", 1), with("WithB", "b"), with("WithA", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if got := Get(s, "WithA", 0); got != 2 {
		t.Errorf("WithA = %d, want the later value 2", got)
	}
	if got := Get(s, "WithC", "default"); got != "default" {
		t.Errorf("WithC = %q, want the default", got)
	}
	if !s.Has("WithB") || s.Has("WithC") {
		t.Errorf("Has: WithB %v, WithC %v", s.Has("WithB"), s.Has("WithC"))
	}
	if err := s.Check(errInvalid, "x.New", "WithA", "WithB"); err != nil {
		t.Errorf("Check with both used: %v", err)
	}
	err = s.Check(errInvalid, "x.New", "WithA")
	if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "x.New does not take option WithB") {
		t.Errorf("Check = %v, want an invalid-option error naming WithB", err)
	}
}

func TestApplyStopsAtFirstError(t *testing.T) {
	bad := errors.New("bad")
	ran := false
	_, err := Apply(errInvalid, []option{
		func(*Set) error { return bad },
		func(*Set) error { ran = true; return nil },
	})
	if !errors.Is(err, bad) || ran {
		t.Errorf("Apply = %v, later option ran %v; want the first error and no later option", err, ran)
	}
}

func TestApplyRefusesNil(t *testing.T) {
	_, err := Apply(errInvalid, []option{with("WithA", 1), nil})
	if !errors.Is(err, errInvalid) {
		t.Errorf("Apply with a nil option = %v, want an error wrapping the family's invalid-option error", err)
	}
}

func TestGetAsRefusesAnotherType(t *testing.T) {
	s, err := Apply(errInvalid, []option{with("WithM", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := GetAs(s, errInvalid, "x.New", "WithM", 0); err != nil || got != 1 {
		t.Errorf("GetAs int = %d, %v; want 1", got, err)
	}
	if got, err := GetAs(s, errInvalid, "x.New", "WithN", "def"); err != nil || got != "def" {
		t.Errorf("GetAs unset = %q, %v; want the default", got, err)
	}
	got, err := GetAs(s, errInvalid, "x.New", "WithM", "def")
	if !errors.Is(err, errInvalid) || got != "def" || !strings.Contains(err.Error(), "x.New: option WithM holds a int") {
		t.Errorf("GetAs string of an int = %q, %v; want the default and an invalid-option error", got, err)
	}
}
