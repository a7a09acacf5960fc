package sqlarchive_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testsql"
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

// oldMySQLSchema is the MySQL schema of the versions before the binary
// columns: utf8mb4_bin VARCHAR and TEXT, PAD SPACE ("k1" = "k1 "), the
// topic at most 191 characters. {p} is the prefix.
var oldMySQLSchema = []string{
	"CREATE TABLE `{p}_entries` (\n" +
		"  seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, id VARCHAR(191) NOT NULL, payload LONGBLOB NOT NULL,\n" +
		"  metadata LONGBLOB NOT NULL, copies INT NOT NULL, archived_at BIGINT NOT NULL, reason TEXT NOT NULL,\n" +
		"  original_topic VARCHAR(191) NOT NULL, handler TEXT NOT NULL, op_key TEXT NOT NULL, error MEDIUMTEXT NOT NULL,\n" +
		"  error_type TEXT NOT NULL, dead_lettered_at BIGINT NOT NULL, replay_id TEXT NOT NULL,\n" +
		"  state VARCHAR(16) NOT NULL DEFAULT 'open', state_at BIGINT NOT NULL DEFAULT 0, note VARCHAR(1000) NOT NULL DEFAULT '',\n" +
		"  failed_again_as VARCHAR(191) NOT NULL DEFAULT '', error_site VARCHAR(512) NOT NULL DEFAULT '',\n" +
		"  UNIQUE KEY {p}_entries_id (id), KEY {p}_entries_dl_idx (dead_lettered_at),\n" +
		"  KEY {p}_entries_topic_idx (original_topic, seq), KEY {p}_entries_state_idx (state, seq),\n" +
		"  KEY {p}_entries_state_dl_idx (state, dead_lettered_at)\n" +
		") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
	"CREATE TABLE `{p}_replayed` (ord BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, entry_id VARCHAR(191) NOT NULL,\n" +
		"  replay_id VARCHAR(191) NOT NULL, UNIQUE KEY {p}_replayed_uq (entry_id, replay_id)\n" +
		") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
	"CREATE TABLE `{p}_runs` (id VARCHAR(191) NOT NULL PRIMARY KEY, body LONGTEXT NOT NULL\n" +
		") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
	"CREATE TABLE `{p}_counts` (grp CHAR(64) NOT NULL PRIMARY KEY, reason TEXT NOT NULL, original_topic VARCHAR(191) NOT NULL,\n" +
		"  handler TEXT NOT NULL, error_type TEXT NOT NULL, error_site VARCHAR(512) NOT NULL, state VARCHAR(16) NOT NULL,\n" +
		"  n BIGINT NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
	"CREATE TABLE `{p}_seqlock` (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB",
	"INSERT INTO `{p}_seqlock` (id) VALUES (1)",
}

// TestMigrateMySQLBinaryColumns: Migrate brings the tables of the earlier
// MySQL schema to binary columns, keeping every row, and counts again the
// entries whose keys the PAD SPACE columns merged; the archive then keeps
// "k1" and "k1 " apart and takes a 249-character topic.
func TestMigrateMySQLBinaryColumns(t *testing.T) {
	t.Parallel()
	db := testsql.MySQL(t)
	var r [5]byte
	_, _ = rand.Read(r[:])
	prefix := "dlqb_" + hex.EncodeToString(r[:])
	a, err := sqlarchive.New(db, sqlstore.MySQL, archive.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, table := range sqlarchive.Tables(a) {
			_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table)
		}
	})
	ctx := t.Context()
	for _, stmt := range oldMySQLSchema {
		_, err := db.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", prefix))
		require.NoError(t, err, stmt)
	}
	// Entries written on the old schema (this version's Publish writes
	// the same columns): keys, topics and handlers that differ by a
	// trailing space, which the old columns compare equal.
	var msgs []*message.Message
	for i, pad := range []string{"", " "} {
		m := message.NewMessage(fmt.Sprintf("entry-%d", i), []byte("p"))
		m.Metadata.Set(dlq.KeyReason, string(dlq.ReasonExhausted))
		m.Metadata.Set(dlq.KeyOriginalTopic, "orders"+pad)
		m.Metadata.Set(dlq.KeyHandler, "ship"+pad)
		m.Metadata.Set(dlq.KeyOperationKey, "k1"+pad)
		msgs = append(msgs, m)
	}
	require.NoError(t, a.Publish("dead", msgs...))
	got, err := a.List(ctx, archive.Filter{Key: "k1"}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, got, 2, "the old schema merges k1 and k1 : the fixture shows what the upgrade fixes")
	// The counts as the old Migrate made them: grouped by the PAD SPACE
	// columns.
	_, err = db.ExecContext(ctx, "DELETE FROM "+prefix+"_counts")
	require.NoError(t, err)
	cols := "reason, original_topic, handler, error_type, error_site, state"
	_, err = db.ExecContext(ctx, "INSERT INTO "+prefix+"_counts (grp, "+cols+", n) SELECT SHA2(CONCAT_WS(CHAR(0), "+cols+"), 256), "+
		cols+", COUNT(*) FROM "+prefix+"_entries GROUP BY "+cols)
	require.NoError(t, err)
	st, err := a.Stats(ctx, archive.Filter{})
	require.NoError(t, err)
	require.Len(t, st.ByTopic, 1, "old counts merged the topics: %v", st.ByTopic)
	// A mark on the old schema moves the merged group's count.
	require.NoError(t, a.SaveReplay(ctx, archive.ReplayRun{ID: "run-1", Target: "a"}))
	n, err := a.Mark(ctx, archive.Mark{To: archive.StateReplayed, Run: "run-1"}, "entry-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	require.NoError(t, a.Migrate(ctx))
	require.NoError(t, a.Migrate(ctx), "Migrate is idempotent")
	for table, want := range map[string]map[string]string{
		prefix + "_entries":  {"id": "varbinary(2048)", "original_topic": "longblob", "handler": "longblob", "op_key": "longblob", "state": "varbinary(16)", "error_site": "varbinary(512)"},
		prefix + "_replayed": {"entry_id": "varbinary(2048)", "replay_id": "varbinary(512)"},
		prefix + "_runs":     {"id": "varbinary(512)"},
		prefix + "_counts":   {"original_topic": "longblob", "handler": "longblob", "state": "varbinary(16)"},
	} {
		for col, typ := range want {
			var got string
			require.NoError(t, db.QueryRowContext(ctx, "SELECT LOWER(COLUMN_TYPE) FROM information_schema.columns"+
				" WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", table, col).Scan(&got))
			require.Equal(t, typ, got, "%s.%s", table, col)
		}
	}

	// Every row kept; the keys apart; the counts per exact value.
	for _, m := range msgs {
		e, err := a.Get(ctx, m.UUID)
		require.NoError(t, err)
		require.Equal(t, m.Metadata.Get(dlq.KeyOperationKey), e.OperationKey)
	}
	run, err := a.LoadReplay(ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, "a", run.Target)
	for i, pad := range []string{"", " "} {
		f := archive.Filter{Key: "k1" + pad}
		got, err := a.List(ctx, f, archive.Page{})
		require.NoError(t, err)
		require.Len(t, got, 1, "List(Key %q)", f.Key)
		require.Equal(t, msgs[i].UUID, got[0].ID)
		require.True(t, f.Match(got[0]))
	}
	got, err = a.List(ctx, archive.Filter{ReplayedBy: "run-1"}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, []string{"run-1"}, got[0].ReplayedBy)
	st, err = a.Stats(ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orders": 1, "orders ": 1}, st.ByTopic, "Migrate counted the entries again")
	require.Equal(t, map[string]int{"open": 1, "replayed": 1}, st.ByState)

	long := message.NewMessage("long", []byte("p"))
	long.Metadata.Set(dlq.KeyOriginalTopic, strings.Repeat("t", 249))
	require.NoError(t, a.Publish("dead", long))
	st, err = a.Stats(ctx, archive.Filter{Topic: strings.Repeat("t", 249)})
	require.NoError(t, err)
	require.Equal(t, 1, st.Total)
	for _, id := range []string{"entry-0", "entry-1", "long"} {
		_, err := a.Delete(ctx, id)
		require.NoError(t, err)
	}
	st, err = a.Stats(ctx, archive.Filter{})
	require.NoError(t, err)
	require.Zero(t, st.Total, "the counts follow every delete: %+v", st)
}

// TestMigratePostgresIndexesOfAnyLength: Migrate replaces the indexes of
// earlier PostgreSQL archives that cannot take a value longer than about
// 2,700 bytes (the topic's, the counts' primary key) with indexes of
// hashes, keeping the counts exact.
func TestMigratePostgresIndexesOfAnyLength(t *testing.T) {
	t.Parallel()
	b := backends[1]
	require.Equal(t, sqlstore.Postgres, b.dialect)
	a := setup(t, b)
	db := b.open(t)
	prefix := strings.TrimSuffix(sqlarchive.Tables(a)[0], "_entries")
	ctx := t.Context()
	old := message.NewMessage("old", []byte("p"))
	old.Metadata.Set(dlq.KeyOriginalTopic, "orders")
	require.NoError(t, a.Publish("dead", old))
	// The indexes of the earlier versions.
	for _, stmt := range []string{
		`DROP INDEX "` + prefix + `_entries_topic_md5_idx"`,
		`CREATE INDEX "` + prefix + `_entries_topic_idx" ON "` + prefix + `_entries" (original_topic, seq)`,
		`DROP INDEX "` + prefix + `_counts_key"`,
		`ALTER TABLE "` + prefix + `_counts" ADD PRIMARY KEY (reason, original_topic, handler, error_type, error_site, state)`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	long := message.NewMessage("long", []byte("p"))
	var r [3000]byte
	_, _ = rand.Read(r[:])
	topic := hex.EncodeToString(r[:])
	long.Metadata.Set(dlq.KeyOriginalTopic, topic)
	require.ErrorContains(t, a.Publish("dead", long), "index row", "the earlier indexes refuse a long topic")

	require.NoError(t, a.Migrate(ctx))
	require.NoError(t, a.Publish("dead", long))
	require.NoError(t, a.Publish("dead", long), "a copy")
	st, err := a.Stats(ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orders": 1, topic: 1}, st.ByTopic)
	got, err := a.List(ctx, archive.Filter{Topic: topic}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Copies)
}
