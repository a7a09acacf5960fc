package options

import (
	"errors"
	"strings"
	"testing"
)

var errInvalid = errors.New("x: invalid option")

type tag struct{}

type option = Option[tag]

func with(name string, v any) option {
	return Func[tag](func(s *Set) error { s.Put(name, v); return nil })
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
		Func[tag](func(*Set) error { return bad }),
		Func[tag](func(*Set) error { ran = true; return nil }),
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

func TestLoadRefusesAnOptionNotUsed(t *testing.T) {
	s, err := Load(errInvalid, "x.New", []option{with("WithA", 1)}, "WithA", "WithB")
	if err != nil || Get(s, "WithA", 0) != 1 {
		t.Fatalf("Load = %v, %v; want WithA recorded", s, err)
	}
	_, err = Load(errInvalid, "x.New", []option{with("y.WithM", 1)}, "x.WithM")
	if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "x.New does not take option y.WithM") {
		t.Errorf("Load of another package's option = %v, want it refused by name", err)
	}
	if _, err := Load(errInvalid, "x.New", []option{nil}); !errors.Is(err, errInvalid) {
		t.Errorf("Load of a nil option = %v, want an invalid-option error", err)
	}
}

func TestPutNotNil(t *testing.T) {
	var s Set
	if err := PutNotNil[error](&s, errInvalid, "x.WithE", nil); !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "x.WithE: nil") {
		t.Errorf("PutNotNil(nil) = %v, want an error naming the option", err)
	}
	if err := PutNotNil[*int](&s, errInvalid, "x.WithP", nil); !errors.Is(err, errInvalid) {
		t.Errorf("PutNotNil(nil pointer) = %v, want an invalid-option error", err)
	}
	if s.Has("x.WithE") || s.Has("x.WithP") {
		t.Error("a refused value was recorded")
	}
	if err := PutNotNil(&s, errInvalid, "x.WithE", errInvalid); err != nil || !errors.Is(Get[error](&s, "x.WithE", nil), errInvalid) {
		t.Errorf("PutNotNil(value) = %v, want it recorded", err)
	}
}

func TestWithinAndAtLeast(t *testing.T) {
	s, err := Apply(errInvalid, []option{with("WithN", 7)})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Within(s, errInvalid, "x.New", "WithN", 1, 1, 7); err != nil || v != 7 {
		t.Errorf("Within(7, 1..7) = %d, %v; want 7", v, err)
	}
	if v, err := Within(s, errInvalid, "x.New", "WithM", 3, 1, 2); err != nil || v != 3 {
		t.Errorf("Within of an unset option = %d, %v; want the default, unchecked", v, err)
	}
	v, err := Within(s, errInvalid, "x.New", "WithN", 1, 1, 6)
	if !errors.Is(err, errInvalid) || v != 1 || !strings.Contains(err.Error(), "x.New: WithN(7) is not in 1..6") {
		t.Errorf("Within(7, 1..6) = %d, %v; want the default and an error naming the option", v, err)
	}
	if v, err := AtLeast(s, errInvalid, "x.New", "WithN", 1, 7); err != nil || v != 7 {
		t.Errorf("AtLeast(7, 7) = %d, %v; want 7", v, err)
	}
	_, err = AtLeast(s, errInvalid, "x.New", "WithN", 1, 8)
	if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "x.New: WithN(7) is below 8") {
		t.Errorf("AtLeast(7, 8) = %v; want an error naming the option", err)
	}
}
