package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
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
		"CREATE TABLE IF NOT EXISTS \"t\" (a int)":             {"create_table", `"t"`, ""},
		"  create table if not exists `t` (a int)":             {"create_table", "`t`", ""},
		"ALTER TABLE \"t\" ADD COLUMN c TEXT":                  {"add_column", `"t"`, "c"},
		"CREATE UNIQUE INDEX IF NOT EXISTS \"i\" ON \"t\" (a)": {"create_index", `"i"`, ""},
		"DROP INDEX IF EXISTS \"i\"":                           {"drop_index", `"i"`, ""},
		"ALTER TABLE `t` ADD KEY i_idx (a, b)":                 {"create_index", "i_idx", ""},
		"ALTER TABLE t ADD INDEX `i` (a)":                      {"create_index", "`i`", ""},
		"ALTER TABLE `t` ADD COLUMN k INT, ADD KEY i (k)":      {"add_column", "`t`", "k"},
		"SELECT pg_advisory_xact_lock(1)":                      {"other", "", ""},
		"INSERT IGNORE INTO `l` (id) VALUES (1)":               {"other", "", ""},
	} {
		kind, name, column := classify(stmt)
		assert.Equal(t, want, [3]string{kind, name, column}, stmt)
	}
}
