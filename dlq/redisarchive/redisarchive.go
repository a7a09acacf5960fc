package redisarchive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/archivekit"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/internal/redispersist"
	"github.com/surely-dev/surely/internal/rediswait"
)

// defaultPrefix is the key prefix unless archive.WithPrefix is given.
const defaultPrefix = "surely:dlq"

// scanBatch is how many index entries List and Stats read per round trip.
const scanBatch = 256

// ErrNotReplicated is returned (wrapped) by Publish under WithWaitReplicas
// when fewer replicas than asked acknowledged an entry within the timeout.
// The entry is stored on the primary; only its replication is not
// confirmed. Ingest then nacks the broker's copy, which is delivered again
// and counted as a copy of the entry.
var ErrNotReplicated = errors.New("redisarchive: entry not acknowledged by enough replicas")

// Archive is an archive.Archive on Redis. It is safe for concurrent use.
type Archive struct {
	rdb       redis.UniversalClient
	tag       string // "{prefix}:"
	now       func() time.Time
	log       *slog.Logger // Prune's reports; discard unless dlq.WithLogger
	warn      *slog.Logger // warnings; slog.Default() unless dlq.WithLogger
	retention time.Duration

	waitN       int
	waitTimeout time.Duration

	checked    sync.Once  // the durability check of the first Publish or Durability
	durability Durability // what that check found
}

var _ archive.Archive = (*Archive)(nil)

// nameWaitReplicas is the name WithWaitReplicas records.
const nameWaitReplicas = "redisarchive.WithWaitReplicas"

// WithWaitReplicas makes Publish return only after n replicas acknowledged
// each entry (Redis WAIT n timeout), and return an error wrapping
// ErrNotReplicated when fewer did within timeout. It costs one more round
// trip per Publish, lasting until the replicas answered (up to timeout).
// WAIT is sent on the connection that wrote the entries, as Redis
// requires; this needs a *redis.Client (single node, Sentinel) or a
// *redis.ClusterClient.
func WithWaitReplicas(n int, timeout time.Duration) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		w, err := rediswait.New(n, timeout)
		if err != nil {
			return fmt.Errorf("%w: redisarchive: %w", dlq.ErrInvalidOption, err)
		}
		s.Put(nameWaitReplicas, w)
		return nil
	})
}

// New returns an archive on rdb. It never closes rdb. It takes
// archive.WithPrefix (the key prefix, default "surely:dlq"; it becomes the
// Cluster hash tag of every key, so it must not contain braces),
// WithWaitReplicas, dlq.WithRetention (default: keep
// everything, Prune deletes nothing), dlq.WithClock (stamps ArchivedAt and
// the age Prune measures; default time.Now) and dlq.WithLogger (the
// durability warnings of the first Publish, default slog.Default(), and
// Prune's reports, default: discard). New does not contact the server:
// the first Publish (or Durability) reads its persistence and eviction
// settings.
func New(rdb redis.UniversalClient, opts ...dlq.Option) (*Archive, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", dlq.ErrInvalidOption)
	}
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(dlq.ErrInvalidOption, "redisarchive.New", archivekit.PrefixOption, nameWaitReplicas,
		options.Retention, options.Clock, options.Logger); err != nil {
		return nil, err
	}
	prefix := options.Get(s, archivekit.PrefixOption, defaultPrefix)
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("%w: redis archive prefix %q must not contain braces", dlq.ErrInvalidOption, prefix)
	}
	wait := options.Get(s, nameWaitReplicas, rediswait.Replicas{})
	a := &Archive{
		rdb:         rdb,
		tag:         "{" + prefix + "}:",
		now:         options.Get(s, options.Clock, time.Now),
		log:         options.Get(s, options.Logger, slog.New(slog.DiscardHandler)),
		warn:        options.Get(s, options.Logger, slog.Default()),
		retention:   options.Get(s, options.Retention, time.Duration(0)),
		waitN:       wait.N,
		waitTimeout: wait.Timeout,
	}
	if a.waitN > 0 {
		if err := rediswait.Supported(rdb); err != nil {
			return nil, fmt.Errorf("%w: redisarchive: WithWaitReplicas: %w", dlq.ErrInvalidOption, err)
		}
	}
	return a, nil
}

// Durability is what the archive's check found about how long the server
// keeps the entries: its persistence (how much a crash or restart can take
// away) and its eviction policy (whether a full server drops entries). On
// a cluster (or ring) it is the weakest of its primaries. It suits a
// health check: it reports every condition, also one whose warning this
// process had already logged.
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
	// WaitReplicas is how many replicas every Publish waits for
	// (WithWaitReplicas); 0: none, and a failover can lose the last entries.
	WaitReplicas int
	// Warning is the persistence warning, as logged: how much a crash or
	// restart of the server can lose; "" only with AOF and appendfsync
	// always.
	Warning string
	// EvictionWarning is the eviction warning, as logged; "" when the
	// server evicts no entry: maxmemory-policy noeviction (a full server
	// then refuses Publish, and Ingest nacks), a volatile-* policy (no
	// entry has a TTL), or no maxmemory.
	EvictionWarning string
}

// Durability returns what the archive's durability check found. The check
// reads the server once: at the first Publish, or at the first call of
// Durability if that comes first, with that call's context; it logs the
// warnings of the package doc ("Durability"), each once per server per
// process. A check that could not read the server reports both conditions
// unknown, with warnings.
func (a *Archive) Durability(ctx context.Context) Durability {
	a.checked.Do(func() { a.checkDurability(ctx) })
	return a.durability
}

// checkDurability reads the server's persistence and eviction settings
// and warns when a crash, a restart or a full server can lose acknowledged
// dead letters (see the package doc), as redisstore does for its records.
func (a *Archive) checkDurability(ctx context.Context) {
	const (
		what   = "dead letters"
		lost   = "; an acknowledged dead letter lost this way is gone for good"
		evicts = "; an evicted dead letter is gone for good (its broker copy was acked); set maxmemory-policy noeviction"
	)
	p, err := redispersist.Read(ctx, a.rdb)
	d := Durability{AOF: p.AOF, AppendFsync: p.AppendFsync, RDB: p.RDB, ConfigRead: p.ConfigRead,
		MaxMemoryPolicy: p.Policy, MaxMemory: p.MaxMemory, WaitReplicas: a.waitN}
	if err != nil {
		d.Warning = "redisarchive: " + redispersist.Unknown(err, what) + lost
		d.EvictionWarning = "redisarchive: " + redispersist.EvictionUnknown(err, what) + evicts
	} else {
		if loss := p.Loss(what); loss != "" {
			d.Warning = "redisarchive: " + loss + lost
		}
		// No entry has a TTL: volatile-* policies evict none.
		if ev := p.Eviction(what, false); ev != "" {
			d.EvictionWarning = "redisarchive: " + ev + evicts
		}
	}
	a.durability = d
	if d.Warning != "" {
		redispersist.Warn(ctx, a.warn, p.Servers, d.Warning,
			slog.Bool("aof", d.AOF), slog.String("appendfsync", d.AppendFsync),
			slog.Bool("rdb", d.RDB), slog.Bool("config_read", d.ConfigRead))
	}
	if d.EvictionWarning != "" {
		redispersist.Warn(ctx, a.warn, p.Servers, d.EvictionWarning,
			slog.String("maxmemory_policy", d.MaxMemoryPolicy), slog.Int64("maxmemory", d.MaxMemory))
	}
}

func (a *Archive) seqKey() string            { return a.tag + "seq" }
func (a *Archive) idxKey() string            { return a.tag + "idx" }
func (a *Archive) entryKey(id string) string { return a.tag + "e:" + id }
func (a *Archive) runKey(id string) string   { return a.tag + "run:" + id }
func (a *Archive) runsKey() string           { return a.tag + "runs" }

// publishScript stores one entry unless it exists; then it counts a copy.
// A new entry whose message replays another (KEYS[4], the entry of its
// dlq.KeyReplayOf; KEYS[1] when it has none) becomes that one's
// failed-again link (fa).
// KEYS: entry, seq counter, index, replayed entry. ARGV: id, archived-at,
// field/value pairs.
var publishScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'copies', 1)
  return 0
end
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'seq', seq, 'copies', 1, 'at', ARGV[2])
local i = 3
while i <= #ARGV do
  local j = math.min(i + 199, #ARGV)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('ZADD', KEYS[3], seq, ARGV[1])
if KEYS[4] ~= KEYS[1] and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[4], 'fa', ARGV[1])
end
return seq
`)

// markScript moves an entry to a state; a replayed mark also appends the
// run ID to the entry's runs once.
// KEYS: entry. ARGV: state, run ID, note, Unix ns. Returns 0 when the
// entry does not exist.
var markScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == 'replayed' then
  local rb = redis.call('HGET', KEYS[1], 'rb')
  if not rb then
    redis.call('HSET', KEYS[1], 'rb', ARGV[2])
  elseif not string.find('\0' .. rb .. '\0', '\0' .. ARGV[2] .. '\0', 1, true) then
    redis.call('HSET', KEYS[1], 'rb', rb .. '\0' .. ARGV[2])
  end
end
redis.call('HSET', KEYS[1], 'st', ARGV[1], 'sa', ARGV[4], 'sn', ARGV[3])
return 1
`)

// Publish stores each message as an entry; the topic is ignored. A message
// whose UUID is already archived increments that entry's Copies. The calls
// use each message's context. A message without a UUID fails the whole
// call with archive.ErrNoID before anything is stored.
func (a *Archive) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m == nil || m.UUID == "" {
			return fmt.Errorf("redisarchive: publish: %w", archive.ErrNoID)
		}
	}
	if len(msgs) > 0 {
		a.checked.Do(func() { a.checkDurability(msgs[0].Context()) })
	}
	var rdb redis.Scripter = a.rdb
	var conn *redis.Conn
	if a.waitN > 0 && len(msgs) > 0 {
		c, err := rediswait.PrimaryConn(msgs[0].Context(), a.rdb, a.seqKey())
		if err != nil {
			return fmt.Errorf("redisarchive: publish: %w", err)
		}
		defer func() { _ = c.Close() }()
		rdb, conn = c, c
	}
	for _, m := range msgs {
		now := a.now()
		e := archivekit.Entry(m, now)
		args := make([]any, 0, 22+2*len(m.Metadata))
		args = append(args, m.UUID, strconv.FormatInt(now.UnixNano(), 10), "p", []byte(m.Payload),
			"x:r", string(e.Reason), "x:t", e.OriginalTopic, "x:h", e.Handler, "x:k", e.OperationKey,
			"x:e", e.Error, "x:y", envelope.RootErrorType(e.ErrorTypes),
			"x:d", strconv.FormatInt(e.DeadLetteredAt.UnixNano(), 10), "x:p", m.Metadata.Get(dlq.KeyReplayID), "x:s", e.ErrorSite)
		for k, v := range m.Metadata {
			args = append(args, "m:"+k, v)
		}
		keys := []string{a.entryKey(m.UUID), a.seqKey(), a.idxKey(), a.entryKey(m.UUID)}
		if of := m.Metadata.Get(dlq.KeyReplayOf); of != "" {
			keys[3] = a.entryKey(of)
		}
		if err := publishScript.Run(m.Context(), rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("redisarchive: publish %q: %w", m.UUID, err)
		}
	}
	if conn != nil {
		// One WAIT covers every entry written on conn.
		ctx := msgs[len(msgs)-1].Context()
		acked, err := conn.Wait(ctx, a.waitN, a.waitTimeout).Result()
		if err != nil {
			return fmt.Errorf("redisarchive: publish: WAIT: %w", err)
		}
		if acked < int64(a.waitN) {
			return fmt.Errorf("redisarchive: publish: %w: %d of %d replicas acknowledged within %v",
				ErrNotReplicated, acked, a.waitN, a.waitTimeout)
		}
	}
	return nil
}

// Close does nothing; the caller's client stays open.
func (a *Archive) Close() error { return nil }

// Get returns one entry, or archive.ErrNotFound.
func (a *Archive) Get(ctx context.Context, id string) (archive.Entry, error) {
	h, err := a.rdb.HGetAll(ctx, a.entryKey(id)).Result()
	if err != nil {
		return archive.Entry{}, fmt.Errorf("redisarchive: get %q: %w", id, err)
	}
	if len(h) == 0 {
		return archive.Entry{}, fmt.Errorf("redisarchive: %q: %w", id, archive.ErrNotFound)
	}
	return decode(id, h)
}

// decode builds an entry from its hash.
func decode(id string, h map[string]string) (archive.Entry, error) {
	msg := message.NewMessage(id, []byte(h["p"]))
	for f, v := range h {
		if k, ok := strings.CutPrefix(f, "m:"); ok {
			msg.Metadata[k] = v
		}
	}
	seq, err1 := strconv.ParseInt(h["seq"], 10, 64)
	copies, err2 := strconv.Atoi(h["copies"])
	at, err3 := strconv.ParseInt(h["at"], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return archive.Entry{}, fmt.Errorf("redisarchive: entry %q is corrupt: %w", id, err)
	}
	e := archivekit.Entry(msg, time.Unix(0, at).UTC())
	e.Message = msg
	e.Seq, e.Copies = seq, copies
	if rb, ok := h["rb"]; ok {
		e.ReplayedBy = strings.Split(rb, "\x00")
	}
	if err := lifecycle(&e, h["st"], h["sa"], h["sn"], h["fa"]); err != nil {
		return archive.Entry{}, fmt.Errorf("redisarchive: entry %q is corrupt: %w", id, err)
	}
	return e, nil
}

// lifecycle fills e's lifecycle fields from their hash fields (st, sa, sn,
// fa); an entry without st is open.
func lifecycle(e *archive.Entry, st, sa, sn, fa string) error {
	e.State, e.Note, e.FailedAgainAs = archive.StateOpen, sn, fa
	if st != "" {
		e.State = archive.State(st)
	}
	if sa != "" {
		ns, err := strconv.ParseInt(sa, 10, 64)
		if err != nil {
			return err
		}
		e.StateAt = time.Unix(0, ns).UTC()
	}
	return nil
}

// fetch reads the hashes of ids in one pipeline, skipping deleted ones.
// Without payloads (omit) it reads in two: the field names, then every
// field but the payload.
func (a *Archive) fetch(ctx context.Context, ids []string, omit bool) ([]archive.Entry, error) {
	if omit {
		return a.fetchBare(ctx, ids)
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err := a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, a.entryKey(id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisarchive: read entries: %w", err)
	}
	out := make([]archive.Entry, 0, len(ids))
	for i, c := range cmds {
		h := c.Val()
		if len(h) == 0 {
			continue // deleted since the index was read
		}
		e, err := decode(ids[i], h)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// fetchBare is fetch without the payloads, which never leave the server.
func (a *Archive) fetchBare(ctx context.Context, ids []string) ([]archive.Entry, error) {
	names := make([]*redis.StringSliceCmd, len(ids))
	_, err := a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			names[i] = p.HKeys(ctx, a.entryKey(id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisarchive: read entries: %w", err)
	}
	fields := make([][]string, len(ids))
	vals := make([]*redis.SliceCmd, len(ids))
	_, err = a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			fields[i] = slices.DeleteFunc(names[i].Val(), func(f string) bool { return f == "p" })
			if len(fields[i]) > 0 {
				vals[i] = p.HMGet(ctx, a.entryKey(id), fields[i]...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisarchive: read entries: %w", err)
	}
	out := make([]archive.Entry, 0, len(ids))
	for i, id := range ids {
		if vals[i] == nil {
			continue // deleted since the index was read
		}
		h := make(map[string]string, len(fields[i]))
		for j, v := range vals[i].Val() {
			if v, ok := v.(string); ok {
				h[fields[i][j]] = v
			}
		}
		if _, ok := h["seq"]; !ok {
			continue // deleted between the two reads
		}
		e, err := decode(id, h)
		if err != nil {
			return nil, err
		}
		e.Message.Payload = nil
		out = append(out, e)
	}
	return out, nil
}

// summaryFields are the hash fields a scan reads: what Filter.Match and
// Stats look at, without payload and metadata.
var summaryFields = []string{"seq", "rb", "x:r", "x:t", "x:h", "x:k", "x:e", "x:y", "x:d", "x:p", "st", "fa", "x:s"}

// summaries reads the summary fields of ids in one pipeline, skipping
// deleted entries. The entries have no payload; their Message carries only
// KeyReplayID, and ErrorTypes only the root type.
func (a *Archive) summaries(ctx context.Context, ids []string) ([]archive.Entry, error) {
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, a.entryKey(id), summaryFields...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisarchive: read entries: %w", err)
	}
	out := make([]archive.Entry, 0, len(ids))
	for i, c := range cmds {
		v := c.Val()
		str := func(j int) string { s, _ := v[j].(string); return s }
		if len(v) != len(summaryFields) || v[0] == nil {
			continue // deleted since the index was read
		}
		seq, err1 := strconv.ParseInt(str(0), 10, 64)
		dl, err2 := strconv.ParseInt(str(8), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("redisarchive: entry %q is corrupt: %w", ids[i], err)
		}
		msg := message.NewMessage(ids[i], nil)
		if r := str(9); r != "" {
			msg.Metadata[dlq.KeyReplayID] = r
		}
		e := archive.Entry{
			ID: ids[i], Seq: seq, Message: msg,
			Reason: dlq.Reason(str(2)), OriginalTopic: str(3), Handler: str(4), OperationKey: str(5),
			Error: str(6), ErrorTypes: str(7), DeadLetteredAt: time.Unix(0, dl).UTC(), ErrorSite: str(12),
		}
		if v[1] != nil {
			e.ReplayedBy = strings.Split(str(1), "\x00")
		}
		e.State, e.FailedAgainAs = archive.StateOpen, str(11)
		if st := str(10); st != "" {
			e.State = archive.State(st)
		}
		out = append(out, e)
	}
	return out, nil
}

// scan calls fn with the summary (see summaries) of every entry with
// Seq > after that f selects, in Seq order, until fn returns false. It
// reads the index in batches of want entries at first, doubling up to
// scanBatch, so a small page of a broad filter reads little.
func (a *Archive) scan(ctx context.Context, f archive.Filter, after int64, want int, fn func(archive.Entry) bool) error {
	if len(f.IDs) > 0 {
		return a.scanIDs(ctx, f, after, fn)
	}
	batch := min(max(want, 16), scanBatch)
	for ; ; batch = min(2*batch, scanBatch) {
		ids, last, err := a.readIndex(ctx, after, batch)
		if err != nil || len(ids) == 0 {
			return err
		}
		after = last
		entries, err := a.summaries(ctx, ids)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if f.Match(e) && !fn(e) {
				return nil
			}
		}
		if len(ids) < batch {
			return nil
		}
	}
}

// scanIDs is scan for a filter that names its entries: it reads only
// those, not the index.
func (a *Archive) scanIDs(ctx context.Context, f archive.Filter, after int64, fn func(archive.Entry) bool) error {
	entries, err := a.summaries(ctx, slices.Compact(slices.Sorted(slices.Values(f.IDs))))
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(x, y archive.Entry) int { return cmpInt(x.Seq, y.Seq) })
	for _, e := range entries {
		if e.Seq > after && f.Match(e) && !fn(e) {
			return nil
		}
	}
	return nil
}

// readIndex returns the IDs of at most count entries with Seq > after, in
// Seq order, and the Seq of the last of them.
func (a *Archive) readIndex(ctx context.Context, after int64, count int) (ids []string, last int64, err error) {
	zs, err := a.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: a.idxKey(), Start: "(" + strconv.FormatInt(after, 10), Stop: "+inf",
		ByScore: true, Count: int64(count),
	}).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redisarchive: read index: %w", err)
	}
	if len(zs) == 0 {
		return nil, after, nil
	}
	ids = make([]string, len(zs))
	for i, z := range zs {
		ids[i] = z.Member.(string)
	}
	return ids, int64(zs[len(zs)-1].Score), nil
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// List returns one page of the entries f selects, in Seq order. It scans
// the Seq index from p.After (see the package doc for the cost).
func (a *Archive) List(ctx context.Context, f archive.Filter, p archive.Page) ([]archive.Entry, error) {
	limit := archivekit.PageLimit(p)
	var ids []string
	err := a.scan(ctx, f, p.After, limit, func(e archive.Entry) bool {
		ids = append(ids, e.ID)
		return len(ids) < limit
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return a.fetch(ctx, ids, p.OmitPayload)
}

// Stats summarises the entries f selects; it reads every entry.
func (a *Archive) Stats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	s := archivekit.NewStats()
	err := a.scan(ctx, f, 0, scanBatch, func(e archive.Entry) bool { archivekit.AddStats(&s, e); return true })
	return s, err
}

// Delete removes entries by ID and returns how many existed.
func (a *Archive) Delete(ctx context.Context, ids ...string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	dels := make([]*redis.IntCmd, len(ids))
	_, err := a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			dels[i] = p.Del(ctx, a.entryKey(id))
			p.ZRem(ctx, a.idxKey(), id)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redisarchive: delete: %w", err)
	}
	n := 0
	for _, d := range dels {
		n += int(d.Val())
	}
	return n, nil
}

// Mark moves the entries to m.To and returns how many exist: one script
// call per entry, in one pipeline.
func (a *Archive) Mark(ctx context.Context, m archive.Mark, ids ...string) (int, error) {
	if err := archivekit.CheckMark(m); err != nil {
		return 0, err
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	if len(ids) == 0 {
		return 0, nil
	}
	if err := markScript.Load(ctx, a.rdb).Err(); err != nil {
		return 0, fmt.Errorf("redisarchive: mark: %w", err)
	}
	at := strconv.FormatInt(a.now().UnixNano(), 10)
	cmds := make([]*redis.Cmd, len(ids))
	_, err := a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = markScript.EvalSha(ctx, p, []string{a.entryKey(id)}, string(m.To), m.Run, m.Note, at)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redisarchive: mark: %w", err)
	}
	n := 0
	for _, c := range cmds {
		if k, _ := c.Int(); k == 1 {
			n++
		}
	}
	return n, nil
}

// SaveReplay stores (creates or updates) a replay run, as JSON.
func (a *Archive) SaveReplay(ctx context.Context, run archive.ReplayRun) error {
	if run.ID == "" {
		return fmt.Errorf("%w: replay run without ID", dlq.ErrInvalidOption)
	}
	b, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("redisarchive: encode replay %q: %w", run.ID, err)
	}
	_, err = a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, a.runKey(run.ID), b, 0)
		p.SAdd(ctx, a.runsKey(), run.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisarchive: save replay %q: %w", run.ID, err)
	}
	return nil
}

// ListReplays returns every replay run, the most recently started first:
// the runs of the run set ({prefix}:runs), read in one pipeline. (A run
// saved before the set existed is listed once it is saved again.)
func (a *Archive) ListReplays(ctx context.Context) ([]archive.ReplayRun, error) {
	ids, err := a.rdb.SMembers(ctx, a.runsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisarchive: list replays: %w", err)
	}
	cmds := make([]*redis.StringCmd, len(ids))
	_, err = a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, a.runKey(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisarchive: list replays: %w", err)
	}
	out := make([]archive.ReplayRun, 0, len(ids))
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("redisarchive: list replays: %w", err)
		}
		var run archive.ReplayRun
		if err := json.Unmarshal(b, &run); err != nil {
			return nil, fmt.Errorf("redisarchive: replay %q is corrupt: %w", ids[i], err)
		}
		out = append(out, run)
	}
	archivekit.SortRuns(out)
	return out, nil
}

// LoadReplay reads a replay run back, or returns archive.ErrNotFound.
func (a *Archive) LoadReplay(ctx context.Context, id string) (archive.ReplayRun, error) {
	b, err := a.rdb.Get(ctx, a.runKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return archive.ReplayRun{}, fmt.Errorf("redisarchive: replay %q: %w", id, archive.ErrNotFound)
	}
	if err != nil {
		return archive.ReplayRun{}, fmt.Errorf("redisarchive: load replay %q: %w", id, err)
	}
	var run archive.ReplayRun
	if err := json.Unmarshal(b, &run); err != nil {
		return archive.ReplayRun{}, fmt.Errorf("redisarchive: replay %q is corrupt: %w", id, err)
	}
	return run, nil
}

// Prune deletes the entries dead-lettered longer ago than the retention
// (dlq.WithRetention), logs how many, and returns the count. Without a
// retention it deletes nothing. It scans the whole index.
func (a *Archive) Prune(ctx context.Context) (int, error) {
	if a.retention == 0 {
		return 0, nil
	}
	cutoff := a.now().Add(-a.retention)
	var old []string
	err := a.scan(ctx, archive.Filter{DeadLetteredBefore: cutoff}, 0, scanBatch, func(e archive.Entry) bool {
		old = append(old, e.ID)
		return true
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for chunk := range slices.Chunk(old, 500) {
		d, err := a.Delete(ctx, chunk...)
		n += d
		if err != nil {
			return n, err
		}
	}
	if n > 0 {
		a.log.InfoContext(ctx, "dead-letter archive pruned", "deleted", n, "retention", a.retention.String(), "cutoff", cutoff)
	} else {
		a.log.DebugContext(ctx, "dead-letter archive pruned", "deleted", 0, "retention", a.retention.String(), "cutoff", cutoff)
	}
	return n, nil
}
