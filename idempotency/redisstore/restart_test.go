package redisstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// The durability table of docs/OPERATIONS.md, row by row: a DONE record, then the Redis
// server is killed (SIGKILL, no shutdown save) and restarted on the same
// directory. A duplicate of the operation must then be recognised (the
// record survived) or runs again (it was lost), as the row says.
func TestDoneRecordAcrossARedisRestart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		// rdb: take a snapshot between the first and the second record;
		// records before it survive, records after it are lost.
		rdb bool
		// survives: whether a record completed just before the kill survives.
		survives bool
	}{
		{name: "no persistence", survives: false},
		{name: "RDB snapshots only", args: []string{"--save", "3600 1"}, rdb: true, survives: false},
		{name: "AOF always", args: []string{"--appendonly", "yes", "--appendfsync", "always"}, survives: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, c := privateRedis(t, tc.args...)
			s := newStore(t, c)
			ctx := t.Context()

			complete := func(key string) {
				t.Helper()
				lease := acquire(t, s, claimReq(key))
				require.NoError(t, s.Complete(ctx, lease, idempotency.Outcome{}))
			}
			complete("before-snapshot")
			if tc.rdb {
				require.NoError(t, c.Save(ctx).Err(), "a snapshot, as the save schedule would take")
			}
			complete("last")

			srv.Stop() // SIGKILL: no save on shutdown
			srv.Start(t)

			res, err := s.Claim(ctx, claimReq("last"))
			require.NoError(t, err, "the store reloads its scripts on the restarted server")
			if tc.survives {
				require.Equal(t, idempotency.Completed, res.Status, "the duplicate is recognised")
			} else {
				require.Equal(t, idempotency.Acquired, res.Status, "the record is gone: the duplicate runs again")
			}
			if tc.rdb {
				res, err := s.Claim(ctx, claimReq("before-snapshot"))
				require.NoError(t, err)
				require.Equal(t, idempotency.Completed, res.Status, "records of the last snapshot survive")
			}
		})
	}
}
