package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
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
	// Warning is the warning New logged, "" when a restart of the server
	// keeps the DONE records.
	Warning string
}

// Warnings logged by New (and reported in Durability.Warning).
const (
	warnNoAOF         = "no AOF: a restart loses DONE records written since the last RDB save; duplicates become possible"
	warnNoPersistence = "no persistence (no AOF, no RDB): a restart loses every DONE record; duplicates become possible"
	warnUnknown       = "persistence unknown (%v): without AOF a restart loses DONE records; duplicates become possible"
)

// fsyncRank orders the AOF fsync policies from weakest to strongest.
var fsyncRank = map[string]int{"": 0, "no": 1, "everysec": 2, "always": 3}

// checkDurability reads the persistence settings of every primary and
// returns the weakest. It never fails: an unreadable server yields a warning.
func checkDurability(ctx context.Context, c redis.UniversalClient) Durability {
	var (
		mu    sync.Mutex
		nodes []Durability
		errs  []error
	)
	visit := func(ctx context.Context, n *redis.Client) error {
		d, err := nodeDurability(ctx, n)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		} else {
			nodes = append(nodes, d)
		}
		return nil
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, visit)
	case *redis.Ring:
		err = cc.ForEachShard(ctx, visit)
	default:
		d, nerr := nodeDurability(ctx, c)
		if nerr != nil {
			errs = append(errs, nerr)
		} else {
			nodes = append(nodes, d)
		}
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 || len(nodes) == 0 {
		cause := "no node answered"
		if len(errs) > 0 {
			cause = errs[0].Error()
		}
		return Durability{Warning: fmt.Sprintf(warnUnknown, cause)}
	}
	d := nodes[0]
	for _, n := range nodes[1:] {
		d.AOF = d.AOF && n.AOF
		d.RDB = d.RDB && n.RDB
		d.ConfigRead = d.ConfigRead && n.ConfigRead
		if fsyncRank[n.AppendFsync] < fsyncRank[d.AppendFsync] {
			d.AppendFsync = n.AppendFsync
		}
	}
	if !d.ConfigRead {
		d.AppendFsync, d.RDB = "", false
	}
	switch {
	case !d.AOF && d.ConfigRead && !d.RDB:
		d.Warning = warnNoPersistence
	case !d.AOF:
		d.Warning = warnNoAOF
	}
	return d
}

// nodeDurability reads one server. INFO persistence is required; CONFIG GET
// is optional (disabled on many managed services).
func nodeDurability(ctx context.Context, c redis.Cmdable) (Durability, error) {
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return Durability{}, fmt.Errorf("INFO persistence: %w", err)
	}
	var d Durability
	found := false
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "aof_enabled:"); ok {
			d.AOF, found = v == "1", true
		}
	}
	if !found {
		return Durability{}, fmt.Errorf("INFO persistence has no aof_enabled field")
	}
	fsync, ferr := c.ConfigGet(ctx, "appendfsync").Result()
	save, serr := c.ConfigGet(ctx, "save").Result()
	if ferr == nil && serr == nil {
		d.ConfigRead = true
		d.AppendFsync = fsync["appendfsync"]
		d.RDB = strings.TrimSpace(save["save"]) != ""
	}
	return d, nil
}
