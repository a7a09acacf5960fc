// Package redispersist reads a Redis server's persistence settings and says
// how much of what it acknowledged a crash or restart can lose. The Redis
// idempotency store and the Redis dead-letter archive share it, so both
// warn the same way about the same server.
package redispersist

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Settings are a server's persistence settings; on a cluster (or ring) the
// weakest of its primaries.
type Settings struct {
	// AOF: the append-only file is on (INFO persistence aof_enabled:1).
	AOF bool
	// AppendFsync is the AOF fsync policy: "always", "everysec" or "no";
	// "" when CONFIG GET is not allowed.
	AppendFsync string
	// RDB: snapshot save points are configured (CONFIG GET save); false
	// when CONFIG GET is not allowed.
	RDB bool
	// ConfigRead: CONFIG GET answered (managed services often disable it).
	ConfigRead bool
}

// fsyncRank orders the AOF fsync policies from weakest to strongest.
var fsyncRank = map[string]int{"": 0, "no": 1, "everysec": 2, "always": 3}

// Read reads the persistence settings of every primary of c and returns the
// weakest. It fails when a primary cannot be read.
func Read(ctx context.Context, c redis.UniversalClient) (Settings, error) {
	var (
		mu    sync.Mutex
		nodes []Settings
		errs  []error
	)
	visit := func(ctx context.Context, n *redis.Client) error {
		s, err := readNode(ctx, n)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		} else {
			nodes = append(nodes, s)
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
		s, nerr := readNode(ctx, c)
		if nerr != nil {
			errs = append(errs, nerr)
		} else {
			nodes = append(nodes, s)
		}
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Settings{}, errs[0]
	}
	if len(nodes) == 0 {
		return Settings{}, fmt.Errorf("no node answered")
	}
	s := nodes[0]
	for _, n := range nodes[1:] {
		s.AOF = s.AOF && n.AOF
		s.RDB = s.RDB && n.RDB
		s.ConfigRead = s.ConfigRead && n.ConfigRead
		if fsyncRank[n.AppendFsync] < fsyncRank[s.AppendFsync] {
			s.AppendFsync = n.AppendFsync
		}
	}
	if !s.ConfigRead {
		s.AppendFsync, s.RDB = "", false
	}
	return s, nil
}

// readNode reads one server. INFO persistence is required; CONFIG GET is
// optional.
func readNode(ctx context.Context, c redis.Cmdable) (Settings, error) {
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return Settings{}, fmt.Errorf("INFO persistence: %w", err)
	}
	var s Settings
	found := false
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "aof_enabled:"); ok {
			s.AOF, found = v == "1", true
		}
	}
	if !found {
		return Settings{}, fmt.Errorf("INFO persistence has no aof_enabled field")
	}
	fsync, ferr := c.ConfigGet(ctx, "appendfsync").Result()
	save, serr := c.ConfigGet(ctx, "save").Result()
	if ferr == nil && serr == nil {
		s.ConfigRead = true
		s.AppendFsync = fsync["appendfsync"]
		s.RDB = strings.TrimSpace(save["save"]) != ""
	}
	return s, nil
}

// Loss says what a crash or restart of the server can lose of what it
// acknowledged, what naming the records ("DONE records"); "" when nothing
// (AOF with appendfsync always).
func (s Settings) Loss(what string) string {
	switch {
	case !s.AOF && s.ConfigRead && !s.RDB:
		return "no persistence (no AOF, no RDB): a restart loses all " + what
	case !s.AOF && s.ConfigRead:
		return "no AOF: a restart loses the " + what + " written since the last RDB save"
	case !s.AOF:
		return "no AOF: a restart loses the " + what + " written since the last RDB save, or all of them without save points (CONFIG GET refused)"
	}
	switch s.AppendFsync {
	case "always":
		return ""
	case "everysec":
		// While its once-a-second fsync runs, Redis holds back AOF writes
		// for up to 2 seconds yet acknowledges them.
		return "AOF appendfsync everysec: a crash of the Redis process or its machine can lose up to about 2 seconds of acknowledged " + what
	case "no":
		return "AOF appendfsync no: a crash of the machine loses the acknowledged " + what +
			" the OS has not yet written to disk (typically up to about 30 seconds)"
	case "":
		return "AOF on, appendfsync unknown (CONFIG GET refused): unless it is always, a crash can lose up to about 2 seconds (everysec) or more (no) of acknowledged " + what
	}
	return "AOF appendfsync " + s.AppendFsync + " (unknown policy): a crash can lose acknowledged " + what
}

// Unknown is the warning when the settings could not be read (err from Read).
func Unknown(err error, what string) string {
	return fmt.Sprintf("persistence unknown (%v): without AOF a restart loses %s", err, what)
}
