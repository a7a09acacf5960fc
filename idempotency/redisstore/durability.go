package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/internal/redispersist"
)

// Durability is what New found about the server's persistence: how much of
// the DONE records a crash can take away. On a cluster (or ring) it is the
// weakest of its primaries.
type Durability struct {
	// AOF: the append-only file is on (INFO persistence aof_enabled:1).
	AOF bool
	// AppendFsync is the AOF fsync policy: "always", "everysec" or "no";
	// "" when CONFIG GET is not allowed.
	AppendFsync string
	// RDB: snapshot save points are configured (CONFIG GET save). False
	// also when CONFIG GET is not allowed (see ConfigRead).
	RDB bool
	// ConfigRead: CONFIG GET answered. Managed services often disable it;
	// then RDB and AppendFsync are unknown.
	ConfigRead bool
	// Warning is the warning New logged, saying how much a crash or
	// restart of the server can lose; "" only with AOF and appendfsync
	// always, where neither loses an acknowledged DONE record.
	Warning string
}

// consequence ends every persistence warning of the store.
const consequence = "; duplicates become possible"

// checkDurability reads the persistence settings of every primary and
// returns the weakest. It never fails: an unreadable server yields a warning.
func checkDurability(ctx context.Context, c redis.UniversalClient) Durability {
	const what = "DONE records"
	p, err := redispersist.Read(ctx, c)
	if err != nil {
		return Durability{Warning: redispersist.Unknown(err, what) + consequence}
	}
	d := Durability{AOF: p.AOF, AppendFsync: p.AppendFsync, RDB: p.RDB, ConfigRead: p.ConfigRead}
	if loss := p.Loss(what); loss != "" {
		d.Warning = loss + consequence
	}
	return d
}
