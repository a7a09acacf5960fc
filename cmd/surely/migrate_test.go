package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

// A table made by an earlier version (only its first CREATE TABLE) is
// "pending": status names the statements it lacks, up runs exactly those
// and keeps the rows.
func TestMigrateEarlierTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	url := "sqlite:" + path
	ep, err := endpoint.Store(url)
	require.NoError(t, err)
	target, err := newSchemaTarget("store", ep)
	require.NoError(t, err)
	stmts, err := target.statements(ctx)
	require.NoError(t, err)
	require.Greater(t, len(stmts), 2)
	kind, _, _ := classify(stmts[0].SQL)
	require.Equal(t, "create_table", kind)

	db, err := sql.Open("sqlite", ep.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, stmts[0].SQL)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO surely_inbox (namespace, op_key, state, fingerprint, token, attempts, canceled,
		lease_until_ms, expires_at_ms, updated_at_ms, history) VALUES ('ns', 'k', 'done', 'fp', 't', 1, 0, 0, 0, 0, '[]')`)
	require.NoError(t, err)

	a, _, _ := testApp(t)
	out, stderr, code := run(t, a, "migrate", "status", "--store", url, "--json")
	require.Equal(t, exitPending, code, stderr)
	var st migrateStatusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Targets, 1)
	got := st.Targets[0]
	assert.Equal(t, "pending", got.State)
	var pending []string
	for _, s := range got.Statements {
		if !s.Applied {
			pending = append(pending, s.Kind)
		}
	}
	assert.Equal(t, []string{"add_column", "add_column", "add_column", "add_column", "create_index"}, pending)
	assert.Equal(t, len(pending), got.Pending)
	assert.Contains(t, stderr, "run surely migrate up --store URL")

	out, stderr, code = run(t, a, "migrate", "up", "--store", url)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "applied 5 statements, up to date")
	_, stderr, code = run(t, a, "migrate", "status", "--store", url)
	require.Equal(t, 0, code, stderr)
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM surely_inbox").Scan(&rows))
	assert.Equal(t, 1, rows, "the row is kept")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for stmt, want := range map[string][3]string{
		"CREATE TABLE IF NOT EXISTS \"t\" (a int)":                                                    {"create_table", `"t"`, ""},
		"  create table if not exists `t` (a int)":                                                    {"create_table", "`t`", ""},
		"ALTER TABLE \"t\" ADD COLUMN c TEXT":                                                         {"add_column", `"t"`, "c"},
		"CREATE UNIQUE INDEX IF NOT EXISTS \"i\" ON \"t\" (a)":                                        {"create_index", `"i"`, ""},
		"DROP INDEX IF EXISTS \"i\"":                                                                  {"drop_index", `"i"`, ""},
		"ALTER TABLE `t` ADD KEY i_idx (a, b)":                                                        {"create_index", "i_idx", ""},
		"ALTER TABLE t ADD INDEX `i` (a)":                                                             {"create_index", "`i`", ""},
		"ALTER TABLE `t` ADD COLUMN k INT, ADD KEY i (k)":                                             {"add_column", "`t`", "k"},
		"ALTER TABLE `t` MODIFY COLUMN id VARBINARY(512) NOT NULL, MODIFY COLUMN b LONGBLOB NOT NULL": {"modify_column", "`t`", "id"},
		"ALTER TABLE t MODIFY c INT":                                                                  {"modify_column", "t", "c"},
		"SELECT pg_advisory_xact_lock(1)":                                                             {"other", "", ""},
		"INSERT IGNORE INTO `l` (id) VALUES (1)":                                                      {"other", "", ""},
	} {
		kind, name, column := classify(stmt)
		assert.Equal(t, want, [3]string{kind, name, column}, stmt)
	}
}

// An archive whose MySQL columns have the types of an earlier version is
// "pending" (a modify_column statement not applied), and up converts them.
func TestMigrateStatusColumnTypesMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testsql.MySQL(t)
	prefix := "mig_" + randomName()
	t.Cleanup(func() { dropTables("mysql", testenv.URL(t, "SURELY_MYSQL_URL"), prefix) })
	url := withParam("mysql://"+testenv.URL(t, "SURELY_MYSQL_URL"), "prefix", prefix)
	a, _, _ := testApp(t)
	_, stderr, code := run(t, a, "migrate", "up", "--archive", url)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = run(t, a, "migrate", "status", "--archive", url)
	require.Equal(t, 0, code, stderr)

	// Back to the earlier (PAD SPACE) types of the runs and counts tables.
	for _, stmt := range []string{
		"ALTER TABLE `" + prefix + "_runs` MODIFY COLUMN id VARCHAR(191) NOT NULL",
		"ALTER TABLE `" + prefix + "_counts` MODIFY COLUMN state VARCHAR(16) NOT NULL",
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	out, stderr, code := run(t, a, "migrate", "status", "--archive", url, "--json")
	require.Equal(t, exitPending, code, stderr)
	var st migrateStatusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Targets, 1)
	var pending []string
	for _, s := range st.Targets[0].Statements {
		if !s.Applied {
			pending = append(pending, s.Kind+" "+s.SQL[:strings.Index(s.SQL, " MODIFY")])
		}
	}
	assert.Equal(t, []string{"modify_column ALTER TABLE `" + prefix + "_runs`", "modify_column ALTER TABLE `" + prefix + "_counts`"}, pending)
	assert.Equal(t, "pending", st.Targets[0].State)

	out, stderr, code = run(t, a, "migrate", "up", "--archive", url)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "applied 2 statements, up to date")
	var typ string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT LOWER(COLUMN_TYPE) FROM information_schema.columns"+
		" WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'id'", prefix+"_runs").Scan(&typ))
	assert.Equal(t, "varbinary(512)", typ)
}
