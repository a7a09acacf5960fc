package sqlstore_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// Migrate warns about a SQLite connection without a busy timeout (its
// concurrent claims would fail with SQLITE_BUSY), and only then.
func TestMigrateWarnsOfSQLiteWithoutBusyTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  string
		warn bool
	}{
		{"without", "file:" + filepath.Join(t.TempDir(), "plain.db") + "?_pragma=journal_mode(WAL)", true},
		{"with", sqliteDSN(filepath.Join(t.TempDir(), "busy.db")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s, err := sqlstore.New(openSQLiteDSN(t, tc.dsn), sqlstore.SQLite,
				idempotency.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			require.NoError(t, err)
			require.NoError(t, s.Migrate(t.Context()))
			if tc.warn {
				require.Contains(t, logs.String(), "level=WARN")
				require.Contains(t, logs.String(), "busy timeout")
			} else {
				require.Empty(t, logs.String())
			}
		})
	}
}
