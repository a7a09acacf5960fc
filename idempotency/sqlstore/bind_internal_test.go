package sqlstore

import (
	"slices"
	"testing"
)

// TestBind: bind replaces every "?:name" with the dialect's placeholder and
// keeps the names in order. A name is [a-z0-9_]+ (the whole range, ends
// included) and ends at any other character or at the end of the text; a
// statement may begin or end with an argument.
func TestBind(t *testing.T) {
	cases := []struct {
		dialect Dialect
		in      string
		sql     string
		names   []string
	}{
		{SQLite, "?:a", "?", []string{"a"}},
		{SQLite, "?:az09_z9 = x", "? = x", []string{"az09_z9"}},
		{SQLite, "x IN (?:first,?:second)", "x IN (?,?)", []string{"first", "second"}},
		{SQLite, "?:,x", "?,x", []string{""}},
		{MySQL, "a = ?:zeta9 AND b = ?:z", "a = ? AND b = ?", []string{"zeta9", "z"}},
		{Postgres, "a = ?:x AND b = ?:y9", "a = $1 AND b = $2", []string{"x", "y9"}},
		{SQLite, "no arguments", "no arguments", nil},
	}
	for _, c := range cases {
		got := bind(c.dialect, c.in)
		if got.sql != c.sql || !slices.Equal(got.names, c.names) {
			t.Errorf("bind(%v, %q) = %q %q, want %q %q", c.dialect, c.in, got.sql, got.names, c.sql, c.names)
		}
	}
}
