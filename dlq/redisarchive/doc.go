// Package redisarchive is an archive.Archive on Redis, through a go-redis
// UniversalClient: a single node, Sentinel (failover client) or Redis
// Cluster.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	defer client.Close() // yours: the archive never closes it
//	arch, err := redisarchive.New(client, archive.WithPrefix("billing:dlq"))
//	h, err := handler.New(fn, handler.WithStore(store, "billing"),
//		handler.WithDeadLetter(arch, "dead")) // the topic is ignored
//
// It runs the conformance suite dlq/archivetest against a real server.
//
// # Key layout
//
// Every key of one archive starts with "{" + prefix + "}:" (default prefix
// "surely:dlq"). The braces are a Redis Cluster hash tag: all keys of one
// archive live in one slot, so the scripts that touch several of them are
// never cross-slot, and one archive lives on one shard. Use several
// prefixes to spread several archives over a cluster.
//
//	{prefix}:seq        INCR counter: the Seq of the next new entry
//	{prefix}:idx        sorted set, member entry ID, score Seq
//	{prefix}:e:<id>     hash, one per entry:
//	                    seq, copies, at (ArchivedAt, Unix ns),
//	                    rb (replay run IDs, NUL separated),
//	                    p (payload), m:<key> (one field per metadata key,
//	                    so values stay byte for byte),
//	                    x:r x:t x:h x:k x:e x:y x:d x:p x:s (reason,
//	                    original topic, handler, operation key, error,
//	                    root error type, dead-lettered Unix ns, replay ID,
//	                    call site: a summary of the envelope for filters
//	                    and stats; entries archived before x:s existed
//	                    have no call site there),
//	                    st sa sn fa (lifecycle: state, its time in Unix ns,
//	                    note, failed-again link; no st: open)
//	{prefix}:run:<id>   string, JSON of a archive.ReplayRun
//	{prefix}:runs       set of the run IDs (ListReplays)
//
// Publish is one script call per message (EVALSHA): it creates the hash,
// takes a Seq and indexes the entry, or, when the ID is already archived,
// only increments copies. Seq (scores up to 2^53) is exact in the sorted set.
// A Publish of several messages is not atomic: when it fails midway, the
// messages before the failure are stored, and the caller's retry counts
// them as copies.
//
// # Cost of a query
//
// There are no secondary indexes. List and Stats walk the Seq index from
// Page.After in batches (ZRANGE BYSCORE; the first batch is the page size,
// at least 16, doubling up to 256), read the summary fields of each batch
// in one pipelined HMGET round trip, and evaluate the Filter in the client
// with archive.Filter.Match; List then reads the selected entries in full (one
// pipelined HGETALL round trip), or, with Page.OmitPayload, every field but
// the payload (a pipelined HKEYS round trip, then HMGET). So a List costs O(entries scanned until
// the page is full) and a Stats O(all entries), without payloads crossing
// the network. A Filter with IDs reads only those entries. Measured on a
// loaded two-core machine with 10,000 entries: Stats about 0.5 s, a page of
// 100 of a filter that selects one entry in ten about 0.16 s. That suits an
// archive of up to some hundred thousand dead letters, which an alert (see
// archive.RegisterMetrics) should keep it far below; use sqlarchive for
// more.
//
// # Durability
//
// Publish returns once its script ran on the primary, and Ingest (or the
// dead-letter step) then acks the broker's copy: from that moment the
// archive holds the only copy, and it is exactly as durable as the Redis
// behind it. By the server's persistence:
//
//   - no AOF: a restart loses the entries written since the last RDB save
//     (all of them without save points);
//   - AOF appendfsync everysec: a crash of the Redis process or its
//     machine can lose up to about 2 seconds of acknowledged entries;
//   - AOF appendfsync no: a machine crash loses what the OS had not yet
//     flushed (typically up to about 30 seconds);
//   - AOF appendfsync always: a crash loses nothing acknowledged.
//
// Replication is asynchronous: a failover can lose the last entries
// whatever the primary's persistence, unless WithWaitReplicas(n, timeout)
// makes Publish wait until n replicas acknowledged them (Redis WAIT; else
// an error wrapping ErrNotReplicated, and Ingest nacks, so the broker keeps
// its copy). A server with a maxmemory and an allkeys-* maxmemory-policy
// evicts entries when its memory is full, and an evicted dead letter is
// gone for good; set maxmemory-policy noeviction (a full server then
// refuses Publish, and Ingest nacks: the broker keeps its copy). No entry
// has a TTL, so volatile-* policies evict none; without a maxmemory (0,
// the default) nothing is evicted whatever the policy.
//
// The first Publish (or Archive.Durability, if that comes first) reads the
// server's persistence and eviction settings once (the check the Redis
// idempotency store makes in its New), reports them in Archive.Durability,
// and logs a warning, to slog.Default() unless dlq.WithLogger is given,
// for every persistence setting but AOF always, and one for a policy that
// evicts entries. Each warning is logged once per server (one run of a
// redis-server) per process: a second archive on the same server with the
// same settings logs nothing, and its Durability reports the condition
// all the same.
//
// # Retention
//
// Nothing expires: no key has a TTL and the index has no length cap (a
// server that evicts any key is another matter: see Durability).
// dlq.WithRetention(d) makes Prune delete entries dead-lettered more than d ago;
// Prune logs how many it deleted (slog, Info). Call it from a ticker of
// your own, or delete with Archive.Delete.
package redisarchive
