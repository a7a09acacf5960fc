// Package redispersist reads a Redis server's persistence and eviction
// settings and says how much of what it acknowledged a crash, a restart or
// memory pressure can lose. The Redis idempotency store and the Redis
// dead-letter archive share it, so both warn the same way about the same
// server, and each warning once per server per process (see Warn).
package redispersist

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Settings are a server's persistence and eviction settings; on a cluster
// (or ring) the weakest of its primaries.
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
	// Policy is the maxmemory-policy (INFO memory maxmemory_policy, there
	// since Redis 3.2); "" when INFO did not say.
	Policy string
	// MaxMemory is maxmemory in bytes, 0 for no limit; meaningful only
	// when Policy is known.
	MaxMemory int64
	// Servers are the servers read (every primary of a cluster), also
	// when Read failed on some: the ones it could name.
	Servers []Server
}

// Server names one Redis server.
type Server struct {
	// Addr is the address the client dials ("FailoverClient" for a
	// Sentinel client, whose primary can change).
	Addr string
	// RunID is the server's INFO run_id: random at every start of a
	// redis-server, so it names one run of one server whatever its
	// address. "" when INFO did not answer.
	RunID string
}

// fsyncRank orders the AOF fsync policies from weakest to strongest.
var fsyncRank = map[string]int{"": 0, "no": 1, "everysec": 2, "always": 3}

// Read reads the settings of every primary of c and returns the weakest.
// It fails when a primary cannot be read; the Settings then still name the
// servers it knows of.
func Read(ctx context.Context, c redis.UniversalClient) (Settings, error) {
	var (
		mu    sync.Mutex
		nodes []Settings
		errs  []error
		names []Server
	)
	visit := func(ctx context.Context, n *redis.Client) error {
		s, err := readNode(ctx, n)
		s.Servers[0].Addr = n.Options().Addr
		mu.Lock()
		defer mu.Unlock()
		names = append(names, s.Servers[0])
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
		if o, ok := c.(interface{ Options() *redis.Options }); ok {
			s.Servers[0].Addr = o.Options().Addr
		}
		names = append(names, s.Servers[0])
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
		return Settings{Servers: names}, errs[0]
	}
	if len(nodes) == 0 {
		return Settings{Servers: names}, fmt.Errorf("no node answered")
	}
	s := weakest(nodes)
	s.Servers = names
	return s, nil
}

// weakest returns the weakest of the settings of several servers.
func weakest(nodes []Settings) Settings {
	s := nodes[0]
	for _, n := range nodes[1:] {
		s.AOF = s.AOF && n.AOF
		s.RDB = s.RDB && n.RDB
		s.ConfigRead = s.ConfigRead && n.ConfigRead
		if fsyncRank[n.AppendFsync] < fsyncRank[s.AppendFsync] {
			s.AppendFsync = n.AppendFsync
		}
		if evictRank(n) < evictRank(s) {
			s.Policy, s.MaxMemory = n.Policy, n.MaxMemory
		}
	}
	if !s.ConfigRead {
		s.AppendFsync, s.RDB = "", false
	}
	return s
}

// evictRank orders eviction settings from the one that evicts most to the
// one that evicts nothing: any key, unknown, keys with a TTL, nothing.
func evictRank(s Settings) int {
	switch {
	case s.Policy == "":
		return 1
	case s.Policy == "noeviction" || s.MaxMemory == 0:
		return 3
	case strings.HasPrefix(s.Policy, "volatile-"):
		return 2
	}
	return 0 // allkeys-* or a policy this package does not know
}

// readNode reads one server: INFO (server, persistence, memory: the
// default sections, so that servers before Redis 7, whose INFO takes one
// section, answer in one round trip), then CONFIG GET for what INFO does
// not say (AOF fsync policy, RDB save points). INFO is required; CONFIG
// GET is optional. The Settings name the
// server by its run ID (one Servers element), also on error.
func readNode(ctx context.Context, c redis.Cmdable) (Settings, error) {
	s := Settings{Servers: []Server{{}}}
	info, err := c.Info(ctx).Result()
	if err != nil {
		return s, fmt.Errorf("INFO: %w", err)
	}
	found, maxmem := false, ""
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "aof_enabled":
			s.AOF, found = v == "1", true
		case "run_id":
			s.Servers[0].RunID = v
		case "maxmemory_policy":
			s.Policy = v
		case "maxmemory":
			maxmem = v
		}
	}
	if !found {
		return s, fmt.Errorf("INFO has no aof_enabled field")
	}
	fsync, ferr := c.ConfigGet(ctx, "appendfsync").Result()
	save, serr := c.ConfigGet(ctx, "save").Result()
	if ferr == nil && serr == nil {
		s.ConfigRead = true
		s.AppendFsync = fsync["appendfsync"]
		s.RDB = strings.TrimSpace(save["save"]) != ""
	}
	if s.MaxMemory, err = strconv.ParseInt(maxmem, 10, 64); err != nil {
		s.Policy, s.MaxMemory = "", 0
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

// Eviction says which keys the server evicts when its memory reaches
// maxmemory, what naming the records that live in them ("records"), ttl
// telling whether every one of them has a TTL (volatile-* policies evict
// only those); "" when it evicts none of them: maxmemory-policy
// noeviction (a full server then refuses writes instead), no maxmemory
// (0: no limit), or a volatile-* policy and records without a TTL.
//
// The phrase names the setting and ends with what it evicts, so that the
// caller can add the consequence.
func (s Settings) Eviction(what string, ttl bool) string {
	limit := fmt.Sprintf("maxmemory-policy %s with maxmemory %d bytes", s.Policy, s.MaxMemory)
	switch {
	case s.Policy == "":
		return "maxmemory-policy unknown (INFO did not say): unless it is noeviction or maxmemory is 0, a server whose memory is full evicts keys, " + what + " among them"
	case s.Policy == "noeviction" || s.MaxMemory == 0:
		return ""
	case strings.HasPrefix(s.Policy, "volatile-"):
		if !ttl {
			return ""
		}
		return limit + ": when its memory is full the server evicts keys with a TTL, and all " + what + " have one"
	case strings.HasPrefix(s.Policy, "allkeys-"):
		return limit + ": when its memory is full the server evicts keys, " + what + " among them"
	}
	return limit + " (unknown policy): when its memory is full the server can evict keys, " + what + " among them"
}

// EvictionUnknown is the eviction warning when the settings could not be
// read (err from Read).
func EvictionUnknown(err error, what string) string {
	return fmt.Sprintf("maxmemory-policy unknown (%v): unless it is noeviction or maxmemory is 0, a server whose memory is full evicts keys, %s among them", err, what)
}

// warned holds the (server, warning) pairs this process logged.
var warned = struct {
	sync.Mutex
	m map[[2]string]bool
}{m: map[[2]string]bool{}}

// Warn logs msg at WARN level on l, with attrs and the servers' addresses
// (attribute "servers"), unless this process already logged msg about every
// one of servers: a service that opens many stores on one server, or a
// test suite that opens hundreds, logs each warning once. A server is
// named by its run ID (an address can be reused by another server, and a
// Sentinel client's address names no server), by its address when the run
// ID is unknown. It reports whether it logged, and is safe for concurrent
// use: of concurrent calls with the same msg and servers exactly one logs.
//
// msg is the whole condition: the same server with other settings (another
// msg) warns again, as does a restarted server (a new run ID).
func Warn(ctx context.Context, l *slog.Logger, servers []Server, msg string, attrs ...slog.Attr) bool {
	if !first(servers, msg) {
		return false
	}
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	l.LogAttrs(ctx, slog.LevelWarn, msg, append(attrs, slog.Any("servers", addrs))...)
	return true
}

// first records msg for every one of servers and reports whether one of
// them had not had it yet. No server at all is a server of its own ("").
func first(servers []Server, msg string) bool {
	if len(servers) == 0 {
		servers = []Server{{}}
	}
	warned.Lock()
	defer warned.Unlock()
	fresh := false
	for _, s := range servers {
		id := s.RunID
		if id == "" {
			id = "addr " + s.Addr
		}
		k := [2]string{id, msg}
		if !warned.m[k] {
			warned.m[k], fresh = true, true
		}
	}
	return fresh
}
