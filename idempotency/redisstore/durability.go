package redisstore

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/internal/redispersist"
)

// Durability is what New found about how long the server keeps the
// records: its persistence (how much a crash or restart can take away) and
// its eviction policy (whether a full server drops records before they
// expire). On a cluster (or ring) it is the weakest of its primaries. It
// suits a health check: it reports every condition, also one whose
// warning this process had already logged (see New).
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
	// MaxMemoryPolicy is the server's maxmemory-policy (INFO memory):
	// "noeviction", "allkeys-lru", "volatile-ttl", ...; "" when the server
	// did not say.
	MaxMemoryPolicy string
	// MaxMemory is the server's maxmemory in bytes; 0: no limit, and then
	// the server evicts nothing whatever its policy.
	MaxMemory int64
	// WaitReplicas is how many replicas every Claim and Complete waits for
	// (WithWaitReplicas); 0: none, and a failover can lose the last records.
	WaitReplicas int
	// Warning says how much a crash or restart of the server can lose; ""
	// only with AOF and appendfsync always, where neither loses an
	// acknowledged DONE record.
	Warning string
	// EvictionWarning says which records the server evicts when its memory
	// is full, and what that does; "" when it evicts none: with
	// maxmemory-policy noeviction (a full server then refuses new claims,
	// and the messages wait), or no maxmemory.
	EvictionWarning string
}

// consequence ends every persistence warning of the store.
const consequence = "; duplicates become possible"

// evictionConsequence ends every eviction warning of the store: a record
// evicted before its retention is a record the store never wrote.
const evictionConsequence = ": an evicted DONE record lets a redelivery run the handler again (a duplicate), " +
	"an evicted lease lets a second owner run the operation beside the first; set maxmemory-policy noeviction"

// checkDurability reads the persistence and eviction settings of every
// primary and returns the weakest, and the servers read. It never fails:
// an unreadable server yields warnings.
func checkDurability(ctx context.Context, c redis.UniversalClient) (Durability, []redispersist.Server) {
	const what = "DONE records"
	p, err := redispersist.Read(ctx, c)
	if err != nil {
		return Durability{
			Warning:         redispersist.Unknown(err, what) + consequence,
			EvictionWarning: redispersist.EvictionUnknown(err, "records") + evictionConsequence,
		}, p.Servers
	}
	d := Durability{AOF: p.AOF, AppendFsync: p.AppendFsync, RDB: p.RDB, ConfigRead: p.ConfigRead,
		MaxMemoryPolicy: p.Policy, MaxMemory: p.MaxMemory}
	if loss := p.Loss(what); loss != "" {
		d.Warning = loss + consequence
	}
	// Every record has a TTL (its lease, then its retention), so a
	// volatile-* policy evicts records too.
	if ev := p.Eviction("records", true); ev != "" {
		d.EvictionWarning = ev + evictionConsequence
	}
	return d, p.Servers
}

// warnDurability logs d's warnings on l, each once per server per process.
func warnDurability(ctx context.Context, l *slog.Logger, d Durability, servers []redispersist.Server) {
	if d.Warning != "" {
		redispersist.Warn(ctx, l, servers, d.Warning,
			slog.Bool("aof", d.AOF),
			slog.String("appendfsync", d.AppendFsync),
			slog.Bool("rdb", d.RDB),
			slog.Bool("config_read", d.ConfigRead))
	}
	if d.EvictionWarning != "" {
		redispersist.Warn(ctx, l, servers, d.EvictionWarning,
			slog.String("maxmemory_policy", d.MaxMemoryPolicy),
			slog.Int64("maxmemory", d.MaxMemory))
	}
}
