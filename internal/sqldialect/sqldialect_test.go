package sqldialect

import "testing"

func TestName(t *testing.T) {
	for n, want := range map[int]string{1: "postgres", 2: "mysql", 3: "sqlite", 0: "Dialect(0)", 9: "Dialect(9)"} {
		if got := Name(n); got != want {
			t.Errorf("Name(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRebind(t *testing.T) {
	got := Rebind("SELECT a FROM t WHERE b = ? AND c IN (?, ?)")
	if want := "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)"; got != want {
		t.Errorf("Rebind = %q, want %q", got, want)
	}
	if got := Rebind("SELECT 1"); got != "SELECT 1" {
		t.Errorf("Rebind without placeholders = %q", got)
	}
}
