// Package sqldialect holds what the SQL-backed packages (sqlstore,
// sqlarchive) share about their dialects: each keeps its own exported
// Dialect type, numbered alike (Postgres 1, MySQL 2, SQLite 3).
package sqldialect

import (
	"strconv"
	"strings"
)

// Name is the String of a Dialect numbered n: "postgres", "mysql",
// "sqlite", or "Dialect(n)" for any other number.
func Name(n int) string {
	switch n {
	case 1:
		return "postgres"
	case 2:
		return "mysql"
	case 3:
		return "sqlite"
	default:
		return "Dialect(" + strconv.Itoa(n) + ")"
	}
}

// Rebind turns the "?" placeholders of query into PostgreSQL's $1, $2, ...
// The query must have no "?" other than placeholders.
func Rebind(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
