package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"modernc.org/sqlite"
)

// missingSchema reports whether err says that a table or a column does
// not exist: PostgreSQL's SQLSTATE 42P01 (undefined table) or 42703
// (undefined column), MySQL's errors 1146 and 1054, or SQLite's "no such
// table" and "no such column" (SQLite gives them no code of their own, so
// its message is read).
func missingSchema(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "42P01" || pg.Code == "42703"
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1146 || my.Number == 1054
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		msg := lite.Error()
		return strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column")
	}
	return false
}

// withSchemaHint adds to an error of cmd that a missing table or column
// caused what to do: run surely migrate on the store or archive cmd was
// given. Other errors are returned as they are.
func withSchemaHint(cmd *cobra.Command, err error) error {
	if err == nil || cmd == nil || !missingSchema(err) {
		return err
	}
	var flags []string
	for _, name := range []string{"store", "archive", "outbox"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Value.String() != "" {
			flags = append(flags, "--"+name+" URL")
		}
	}
	target := strings.Join(flags, " ")
	if target == "" {
		target = "--store URL or --archive URL"
	}
	return withCode(exitCode(err), fmt.Errorf("%w\nthe schema is missing or older than this surely: create or update it with\n  surely migrate up %s\n(surely migrate status %s shows what is missing)", err, target, target))
}
