package sqlarchive_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// TestMigrateAddsLifecycleColumns: an entries table created before the
// lifecycle (no state, state_at, note, failed_again_as, no state index)
// gets them from Migrate, its entries open, and a second Migrate changes
// nothing.
func TestMigrateAddsLifecycleColumns(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			var r [5]byte
			_, _ = rand.Read(r[:])
			prefix := "dlqm_" + hex.EncodeToString(r[:])
			a, err := sqlarchive.New(db, b.dialect, archive.WithPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, table := range sqlarchive.Tables(a) {
					_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table)
				}
			})
			ctx := t.Context()
			require.NoError(t, a.Migrate(ctx))
			m := message.NewMessage("old-entry", []byte("p"))
			m.Metadata.Set(dlq.KeyReason, string(dlq.ReasonExhausted))
			require.NoError(t, a.Publish("dead", m))

			// Back to the schema before the lifecycle (and the counts).
			entries := sqlarchive.Tables(a)[0]
			var drops []string
			for _, idx := range []string{prefix + "_entries_state_idx", prefix + "_entries_state_dl_idx"} {
				if b.dialect == sqlstore.MySQL {
					drops = append(drops, "ALTER TABLE "+entries+" DROP INDEX "+idx)
				} else {
					drops = append(drops, `DROP INDEX IF EXISTS "`+idx+`"`)
				}
			}
			drops = append(drops, "DROP TABLE "+prefix+"_counts")
			for _, col := range []string{"state", "state_at", "note", "failed_again_as"} {
				drops = append(drops, "ALTER TABLE "+entries+" DROP COLUMN "+col)
			}
			for _, stmt := range drops {
				_, err := db.ExecContext(ctx, stmt)
				require.NoError(t, err, stmt)
			}
			_, err = db.ExecContext(ctx, "SELECT state FROM "+entries)
			require.Error(t, err, "the column is gone")

			// Until Migrate, a Publish on the old schema fails and keeps
			// nothing: the dead-letter step nacks, the message comes back.
			late := message.NewMessage("late-entry", []byte("p"))
			require.Error(t, a.Publish("dead", late), "Publish before Migrate")

			require.NoError(t, a.Migrate(ctx))
			require.NoError(t, a.Migrate(ctx), "Migrate is idempotent")
			_, err = a.Get(ctx, "late-entry")
			require.ErrorIs(t, err, archive.ErrNotFound, "a failed Publish left an entry")
			got, err := a.Get(ctx, "old-entry")
			require.NoError(t, err)
			require.Equal(t, archive.StateOpen, got.State, "an entry from before the lifecycle is open")
			st, err := a.Stats(ctx, archive.Filter{States: []archive.State{archive.StateOpen}})
			require.NoError(t, err)
			require.Equal(t, 1, st.Total, "Migrate counted the entries archived before the counts")
			n, err := a.Mark(ctx, archive.Mark{To: archive.StateDiscarded, Note: "old"}, "old-entry")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			got, err = a.Get(ctx, "old-entry")
			require.NoError(t, err)
			require.Equal(t, archive.StateDiscarded, got.State)
			require.Equal(t, "old", got.Note)

			// Counts that went wrong (a writer of an older version, a
			// manual change) are rebuilt by Migrate.
			_, err = db.ExecContext(ctx, "UPDATE "+prefix+"_counts SET n = 42")
			require.NoError(t, err)
			require.NoError(t, a.Migrate(ctx))
			st, err = a.Stats(ctx, archive.Filter{})
			require.NoError(t, err)
			require.Equal(t, 1, st.Total)
			require.Equal(t, map[string]int{"discarded": 1}, st.ByState)
		})
	}
}
