package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/outbox"
)

// exitPending is the status of migrate status when a schema is missing or
// not up to date.
const exitPending = 5

func (a *app) migrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the SQL schema of a store, an archive or the outbox",
		Long: `The migrate commands create and update the tables of a SQL idempotency store
(--store), a SQL dead-letter archive (--archive) and the outbox (--outbox,
PostgreSQL), with the statements of the packages' own Migrate
((*sqlstore.Store).Migrate, (*sqlarchive.Archive).Migrate,
(*outbox.Outbox).Migrate): the same SQL the application runs, and as
idempotent (CREATE ... IF NOT EXISTS, columns added only when missing; no
row is changed). Give one or more targets; each is also read from its
SURELY_* variable.

  surely migrate status --store URL     what is applied and what is missing (exit 5 if anything is)
  surely migrate up --store URL         apply what is missing
  surely migrate up --store URL --print print the statements, connect to nothing

Redis needs no schema: a Redis store or archive writes its keys as it
goes; migrate says so and succeeds.

  --store    postgres://..., mysql://..., sqlite:PATH (table: --store-table or ?table=)
  --archive  postgres://...?prefix=P, mysql://..., sqlite:PATH (table prefix: ?prefix=)
  --outbox   postgres://...?table=T (PostgreSQL only)`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	fl := cmd.PersistentFlags()
	fl.String("store", "", "idempotency store URL: postgres://, mysql://, sqlite:PATH (redis:// needs no schema)")
	envFlag(cmd, "store", "SURELY_STORE_URL")
	fl.String("store-table", "", `table of the SQL store (default "surely_inbox")`)
	envFlag(cmd, "store-table", "SURELY_STORE_TABLE")
	fl.String("archive", "", "dead-letter archive URL: postgres://, mysql://, sqlite:PATH (redis:// needs no schema)")
	envFlag(cmd, "archive", "SURELY_ARCHIVE_URL")
	fl.String("outbox", "", "outbox URL: postgres://...[?table=T]")
	envFlag(cmd, "outbox", "SURELY_OUTBOX_URL")
	cmd.AddCommand(a.migrateStatusCmd(), a.migrateUpCmd())
	return cmd
}

// schemaTarget is one schema the migrate commands handle.
type schemaTarget struct {
	what string // store, archive, outbox
	ep   endpoint.Endpoint
	// table names the table(s) for people: Redis, memory, or those of the
	// CREATE TABLE statements of Migrate (see tables).
	table string
	// tables are the names of the CREATE TABLE statements.
	tables []string
	// migrate runs the package's Migrate on db; nil when noSchema is set.
	migrate  func(ctx context.Context, db *sql.DB) error
	noSchema string
}

func (t *schemaTarget) name() string { return fmt.Sprintf("%s %s (%s)", t.what, t.ep, t.table) }

// schemaTargets reads the targets of the command's flags.
func (a *app) schemaTargets(cmd *cobra.Command) ([]*schemaTarget, error) {
	var out []*schemaTarget
	for _, what := range []string{"store", "archive", "outbox"} {
		raw := flagValue(cmd, what)
		if raw == "" {
			continue
		}
		a.secretsOf(raw)
		parse := endpoint.Store
		if what == "archive" {
			parse = endpoint.Archive
		}
		ep, err := parse(raw)
		if err != nil {
			return nil, withCode(exitUsage, err)
		}
		if t := flagValue(cmd, "store-table"); what == "store" && t != "" {
			ep.Table = t
		}
		t, err := newSchemaTarget(what, ep)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, usageErr("nothing to migrate: give --store, --archive or --outbox (or SURELY_STORE_URL, SURELY_ARCHIVE_URL, SURELY_OUTBOX_URL)")
	}
	return out, nil
}

func newSchemaTarget(what string, ep endpoint.Endpoint) (*schemaTarget, error) {
	t := &schemaTarget{what: what, ep: ep}
	switch ep.Kind {
	case endpoint.Redis:
		if what == "outbox" {
			return nil, usageErr("--outbox %s: the outbox is PostgreSQL only", ep)
		}
		t.table, t.noSchema = "Redis", "Redis needs no schema: the "+what+" writes its keys as it goes"
		return t, nil
	case endpoint.Memory:
		t.table, t.noSchema = "memory", "an in-memory "+what+" has no schema"
		return t, nil
	}
	build := t.sqlOutbox
	switch what {
	case "store":
		build = t.sqlStore
	case "archive":
		build = t.sqlArchive
	}
	if err := build(); err != nil {
		return nil, err
	}
	// The names come from the package's own statements (with its defaults).
	stmts, err := t.statements(context.Background())
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, st := range stmts {
		if kind, name, _ := classify(st.SQL); kind == "create_table" {
			tables = append(tables, strings.Trim(name, "\"`"))
		}
	}
	t.tables = tables
	t.table = "table " + strings.Join(tables, ", ")
	if len(tables) > 1 {
		t.table = "tables " + strings.Join(tables, ", ")
	}
	return t, nil
}

// sqlStore makes t the schema of a SQL idempotency store.
func (t *schemaTarget) sqlStore() error {
	if t.ep.Prefix != "" {
		return usageErr("--store %s: ?prefix= is a Redis store's; a SQL store takes ?table=", t.ep)
	}
	var opts []idempotency.Option
	if t.ep.Table != "" {
		opts = append(opts, sqlstore.WithTable(t.ep.Table))
	}
	dialect := map[endpoint.Kind]sqlstore.Dialect{endpoint.Postgres: sqlstore.Postgres, endpoint.MySQL: sqlstore.MySQL, endpoint.SQLite: sqlstore.SQLite}[t.ep.Kind]
	t.migrate = migrateWith(func(db *sql.DB) (*sqlstore.Store, error) { return sqlstore.New(db, dialect, opts...) })
	return nil
}

// sqlArchive makes t the schema of a SQL dead-letter archive.
func (t *schemaTarget) sqlArchive() error {
	if t.ep.Table != "" {
		return usageErr("--archive %s: a SQL archive takes ?prefix= (of its table names), not ?table=", t.ep)
	}
	var opts []dlq.Option
	if t.ep.Prefix != "" {
		opts = append(opts, archive.WithPrefix(t.ep.Prefix))
	}
	dialect := map[endpoint.Kind]sqlstore.Dialect{endpoint.Postgres: sqlstore.Postgres, endpoint.MySQL: sqlstore.MySQL, endpoint.SQLite: sqlstore.SQLite}[t.ep.Kind]
	t.migrate = migrateWith(func(db *sql.DB) (*sqlarchive.Archive, error) { return sqlarchive.New(db, dialect, opts...) })
	return nil
}

// sqlOutbox makes t the schema of the outbox (PostgreSQL only).
func (t *schemaTarget) sqlOutbox() error {
	if t.ep.Kind != endpoint.Postgres {
		return usageErr("--outbox %s: the outbox is PostgreSQL only", t.ep)
	}
	if t.ep.Prefix != "" {
		return usageErr("--outbox %s: the outbox takes ?table=, not ?prefix=", t.ep)
	}
	var opts []outbox.Option
	if t.ep.Table != "" {
		opts = append(opts, outbox.WithTable(t.ep.Table))
	}
	t.migrate = migrateWith(func(db *sql.DB) (*outbox.Outbox, error) { return outbox.New(db, opts...) })
	return nil
}

// migrateWith returns the migrate function of a package: open builds its
// object on a database (sqlstore.New, sqlarchive.New, outbox.New), whose
// Migrate runs the package's statements. An invalid option (a bad table
// name) is a usage error.
func migrateWith[M interface{ Migrate(context.Context) error }](open func(db *sql.DB) (M, error)) func(context.Context, *sql.DB) error {
	return func(ctx context.Context, db *sql.DB) error {
		m, err := open(db)
		if errors.Is(err, outbox.ErrInvalidOption) {
			return withCode(exitUsage, err)
		}
		if err != nil {
			return withOptionCode(err)
		}
		return m.Migrate(ctx)
	}
}

// statements returns what t's Migrate runs on an empty database.
func (t *schemaTarget) statements(ctx context.Context) ([]recordedStmt, error) {
	return record(func(db *sql.DB) error { return t.migrate(ctx, db) })
}

// stmtJSON is one statement in migrate status --json.
type stmtJSON struct {
	SQL string `json:"sql"`
	// Kind: create_table, add_column, modify_column (a change of column
	// types), create_index, drop_index, or other
	// (a statement that runs every time and changes nothing once applied,
	// such as a lock or an INSERT IGNORE of a fixed row).
	Kind    string `json:"kind"`
	Applied bool   `json:"applied"`
}

// schemaJSON is one target in migrate status --json.
type schemaJSON struct {
	Target string   `json:"target"`
	URL    string   `json:"url"`
	Tables []string `json:"tables,omitempty"`
	// State: up_to_date, pending (some statements to run), missing (no
	// table yet), no_schema (Redis, memory).
	State      string     `json:"state"`
	Note       string     `json:"note,omitempty"`
	Pending    int        `json:"pending"`
	Statements []stmtJSON `json:"statements,omitempty"`
}

type migrateStatusJSON struct {
	Targets []schemaJSON `json:"targets"`
}

// status checks every statement of t on the real database.
func (a *app) schemaStatus(ctx context.Context, t *schemaTarget, create bool) (schemaJSON, *sql.DB, error) {
	out := schemaJSON{Target: t.what, URL: t.ep.String(), Tables: t.tables}
	if t.noSchema != "" {
		out.State, out.Note = "no_schema", t.noSchema
		return out, nil, nil
	}
	stmts, err := t.statements(ctx)
	if err != nil {
		return out, nil, err
	}
	db, missingFile, err := openForMigrate(ctx, t.ep, create)
	if err != nil {
		return out, nil, fmt.Errorf("%s %s: %w", t.what, t.ep, err)
	}
	for _, st := range stmts {
		var (
			kind    string
			applied bool
		)
		if !missingFile {
			kind, applied, err = checkStatement(ctx, db, t.ep.Kind, st.SQL)
			if err != nil {
				_ = closeDB(db)
				return out, nil, fmt.Errorf("%s %s: %w", t.what, t.ep, err)
			}
		} else {
			// No database: nothing exists, so only what drops is done.
			kind, _, _ = classify(st.SQL)
			applied = kind == "other" || kind == "drop_index"
		}
		out.Statements = append(out.Statements, stmtJSON{SQL: strings.TrimSpace(st.SQL), Kind: kind, Applied: applied})
		if !applied {
			out.Pending++
		}
	}
	out.State = "up_to_date"
	if out.Pending > 0 {
		out.State = "pending"
		missing := true
		for _, s := range out.Statements {
			if s.Kind == "create_table" && s.Applied {
				missing = false
			}
		}
		if missing {
			out.State = "missing"
		}
	}
	if missingFile {
		out.Note = "the SQLite database file does not exist"
	}
	return out, db, nil
}

func closeDB(db *sql.DB) error {
	if db == nil {
		return nil
	}
	return db.Close()
}

func (a *app) migrateStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show which statements of the schema are applied and which are missing",
		Long: `status checks, for every statement the package's Migrate runs, whether the
database already has what it creates (a table, a column, an index), with
plain reads of the catalog. It changes nothing. It exits with status 5 when
anything is missing, so a deploy step can run

  surely migrate status --store URL || surely migrate up --store URL`,
		Example: `  surely migrate status --store postgres://app@db:5432/app --archive postgres://app@db:5432/app
  surely migrate status --store sqlite:./app.db --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, err := a.schemaTargets(cmd)
			if err != nil {
				return err
			}
			var out migrateStatusJSON
			var behind []string
			for _, t := range targets {
				st, db, err := a.schemaStatus(cmd.Context(), t, false)
				_ = closeDB(db)
				if err != nil {
					return err
				}
				out.Targets = append(out.Targets, st)
				if st.State == "pending" || st.State == "missing" {
					behind = append(behind, "--"+t.what+" URL")
				}
			}
			if asJSON {
				if err := writeJSON(a.stdout, out); err != nil {
					return err
				}
			} else {
				printSchemaStatus(a.stdout, targets, out.Targets)
			}
			if len(behind) > 0 {
				return withCode(exitPending, fmt.Errorf("schema not up to date: run surely migrate up %s", strings.Join(behind, " ")))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSchemaStatus(w io.Writer, targets []*schemaTarget, sts []schemaJSON) {
	for i, st := range sts {
		t := targets[i]
		switch st.State {
		case "no_schema":
			fprintf(w, "%s: %s\n", t.name(), st.Note)
			continue
		case "up_to_date":
			fprintf(w, "%s: up to date (%s applied)\n", t.name(), plural(len(st.Statements), "statement"))
			continue
		}
		state := "missing"
		if st.State == "pending" {
			state = "not up to date"
		}
		if st.Note != "" {
			state += " (" + st.Note + ")"
		}
		fprintf(w, "%s: %s, %d of %s to run:\n", t.name(), state, st.Pending, plural(len(st.Statements), "statement"))
		for _, s := range st.Statements {
			if !s.Applied {
				first, _, _ := strings.Cut(s.SQL, "\n")
				fprintf(w, "  %s\n", clip(first, 100))
			}
		}
	}
}

func (a *app) migrateUpCmd() *cobra.Command {
	var printOnly bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Apply the missing statements of the schema (idempotent)",
		Long: `up runs the package's Migrate on each target: it creates what is missing and
leaves the rest, so running it again changes nothing. A SQLite database
file is created when it does not exist (its directory must). Run it from
one process at a time (a deploy step).

With --print it connects to nothing and prints the statements Migrate runs
on an empty database, for the dialect of each URL: for a DBA, or for your
own migration tool.`,
		Example: `  surely migrate up --store postgres://app@db:5432/app --archive postgres://app@db:5432/app?prefix=billing_dlq
  surely migrate up --store mysql://app:pw@tcp(db:3306)/app --print > surely.sql`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, err := a.schemaTargets(cmd)
			if err != nil {
				return err
			}
			if printOnly {
				return a.printSchemas(cmd.Context(), targets)
			}
			for _, t := range targets {
				if err := a.migrateUp(cmd.Context(), t); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&printOnly, "print", false, "print the statements instead of running them (connects to nothing)")
	return cmd
}

// migrateUp migrates t and says what it did.
func (a *app) migrateUp(ctx context.Context, t *schemaTarget) error {
	before, db, err := a.schemaStatus(ctx, t, true)
	defer func() { _ = closeDB(db) }()
	if err != nil {
		return err
	}
	if before.State == "no_schema" {
		fprintf(a.stdout, "%s: %s\n", t.name(), before.Note)
		return nil
	}
	if err := t.migrate(ctx, db); err != nil {
		return fmt.Errorf("%s %s: %w", t.what, t.ep, err)
	}
	after, db2, err := a.schemaStatus(ctx, t, false)
	_ = closeDB(db2)
	if err != nil {
		return err
	}
	if after.Pending > 0 {
		return fmt.Errorf("%s: %s still not applied after Migrate", t.name(), plural(after.Pending, "statement"))
	}
	if before.Pending == 0 {
		fprintf(a.stdout, "%s: already up to date\n", t.name())
		return nil
	}
	fprintf(a.stdout, "%s: applied %s, up to date\n", t.name(), plural(before.Pending, "statement"))
	return nil
}

// printSchemas prints the statements of every target.
func (a *app) printSchemas(ctx context.Context, targets []*schemaTarget) error {
	for i, t := range targets {
		if i > 0 {
			fprintln(a.stdout)
		}
		if t.noSchema != "" {
			fprintf(a.stdout, "-- %s: %s\n", t.name(), t.noSchema)
			continue
		}
		stmts, err := t.statements(ctx)
		if err != nil {
			return err
		}
		fprintf(a.stdout, "-- %s, %s: what its Migrate runs on an empty database\n", t.name(), t.ep.Kind)
		fprintf(a.stdout, "-- (on an existing one, surely migrate status names the statements still to run)\n")
		for _, st := range stmts {
			fprintf(a.stdout, "%s;\n", strings.TrimSuffix(strings.TrimSpace(st.SQL), ";"))
			if len(st.Args) > 0 {
				fprintf(a.stdout, "-- arguments: %v\n", st.Args)
			}
		}
	}
	return nil
}

// openForMigrate opens the database of ep. A SQLite file that does not
// exist is created when create is set, else reported as missingFile (with
// a nil db).
func openForMigrate(ctx context.Context, ep endpoint.Endpoint, create bool) (db *sql.DB, missingFile bool, err error) {
	if ep.Kind == endpoint.SQLite {
		if _, err := os.Stat(ep.Path); errors.Is(err, os.ErrNotExist) {
			if !create {
				return nil, true, nil
			}
			if _, err := os.Stat(filepath.Dir(ep.Path)); err != nil {
				return nil, false, fmt.Errorf("SQLite database: %w", err)
			}
			if err := os.WriteFile(ep.Path, nil, 0o600); err != nil {
				return nil, false, fmt.Errorf("SQLite database: %w", err)
			}
		}
	}
	db, err = openDB(ctx, ep)
	return db, false, err
}

const sqlIdent = "\"[^\"]+\"|`[^`]+`|[A-Za-z0-9_.]+"

var (
	reCreateTable = regexp.MustCompile(`(?is)^\s*CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(` + sqlIdent + `)`)
	reAddKey      = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(?:` + sqlIdent + `)\s+ADD\s+(?:KEY|INDEX)\s+(` + sqlIdent + `)`)
	reAddColumn   = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(` + sqlIdent + `)\s+ADD\s+(?:COLUMN\s+)?(` + sqlIdent + `)`)
	reCreateIndex = regexp.MustCompile(`(?is)^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\s+(` + sqlIdent + `)`)
	reDropIndex   = regexp.MustCompile(`(?is)^\s*DROP\s+INDEX\s+IF\s+EXISTS\s+(` + sqlIdent + `)`)
	reModify      = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(` + sqlIdent + `)\s+MODIFY\s+(?:COLUMN\s+)?(` + sqlIdent + `)`)
	// reModifyClause is one MODIFY clause of an ALTER TABLE (MySQL): the
	// column and its type, as information_schema's COLUMN_TYPE spells it
	// (in lower case).
	reModifyClause = regexp.MustCompile(`(?i)\bMODIFY\s+(?:COLUMN\s+)?(` + sqlIdent + `)\s+([A-Za-z]+(?:\(\d+\))?)`)
)

// classify names what a statement does, with its table (or index) and
// column.
func classify(stmt string) (kind, name, column string) {
	if m := reCreateTable.FindStringSubmatch(stmt); m != nil {
		return "create_table", m[1], ""
	}
	if m := reAddKey.FindStringSubmatch(stmt); m != nil {
		return "create_index", m[1], ""
	}
	if m := reAddColumn.FindStringSubmatch(stmt); m != nil {
		return "add_column", m[1], m[2]
	}
	if m := reModify.FindStringSubmatch(stmt); m != nil {
		return "modify_column", m[1], m[2]
	}
	if m := reCreateIndex.FindStringSubmatch(stmt); m != nil {
		return "create_index", m[1], ""
	}
	if m := reDropIndex.FindStringSubmatch(stmt); m != nil {
		return "drop_index", m[1], ""
	}
	return "other", "", ""
}

// checkStatement reports whether the database already has what stmt
// creates (or lacks what it drops), with reads only.
func checkStatement(ctx context.Context, db *sql.DB, kind endpoint.Kind, stmt string) (string, bool, error) {
	what, name, column := classify(stmt)
	switch what {
	case "create_table":
		return what, probe(ctx, db, "SELECT 1 FROM "+name+" WHERE 1 = 0"), nil
	case "add_column":
		return what, probe(ctx, db, "SELECT "+column+" FROM "+name+" WHERE 1 = 0"), nil
	case "modify_column":
		ok, err := columnTypesAre(ctx, db, kind, name, stmt)
		return what, ok, err
	case "create_index", "drop_index":
		ok, err := indexExists(ctx, db, kind, name)
		if what == "drop_index" {
			ok = !ok
		}
		return what, ok, err
	}
	return what, true, nil
}

// probe reports whether query runs: a table or column exists.
func probe(ctx context.Context, db *sql.DB, query string) bool {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return false
	}
	_ = rows.Close()
	return true
}

// columnTypesAre reports whether every column that a MODIFY clause of
// stmt names has the type the clause gives it (MySQL's catalog): the
// change of types has run.
func columnTypesAre(ctx context.Context, db *sql.DB, kind endpoint.Kind, quotedTable, stmt string) (bool, error) {
	if kind != endpoint.MySQL {
		return false, fmt.Errorf("no column types for %s", kind)
	}
	table := strings.Trim(quotedTable, "\"`")
	for _, m := range reModifyClause.FindAllStringSubmatch(stmt, -1) {
		col, want := strings.Trim(m[1], "\"`"), strings.ToLower(m[2])
		var got string
		err := db.QueryRowContext(ctx, "SELECT LOWER(COLUMN_TYPE) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
			table, col).Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("look up column %s.%s: %w", table, col, err)
		}
		if got != want {
			return false, nil
		}
	}
	return true, nil
}

// indexExists looks an index up in the catalog (PostgreSQL: on the search
// path).
func indexExists(ctx context.Context, db *sql.DB, kind endpoint.Kind, quoted string) (bool, error) {
	name := strings.Trim(quoted, "\"`")
	var n int
	var err error
	switch kind {
	case endpoint.Postgres:
		err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_class WHERE relkind IN ('i', 'I') AND relname = $1 AND pg_table_is_visible(oid)", name).Scan(&n)
	case endpoint.MySQL:
		err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name = ?", name).Scan(&n)
	case endpoint.SQLite:
		err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?", name).Scan(&n)
	default:
		return false, fmt.Errorf("no index catalog for %s", kind)
	}
	if err != nil {
		return false, fmt.Errorf("look up index %s: %w", name, err)
	}
	return n > 0, nil
}
