// Package redisstore is an idempotency.Store on Redis (lease mode), through
// a go-redis UniversalClient: a single node, Sentinel (failover client) or
// Redis Cluster.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	defer client.Close() // yours: the store never closes it
//	store, err := redisstore.New(ctx, client, idempotency.WithRetention(72*time.Hour))
//
// It implements the state machine of package idempotency exactly as the
// reference memstore does, and runs the conformance suite
// idempotency/idempotencytest. It is written for and tested on Redis 7 (its
// scripts call TIME, which relies on effect replication); older servers are
// untested.
//
// # Key layout
//
// One key per operation: prefix + namespace + ":" + operation key, e.g.
// "surely:payments:order-42". Namespaces cannot contain ":", so two
// (namespace, key) pairs never share a Redis key. Every command and script
// reads and writes exactly that one key (KEYS[1]), so nothing is
// cross-slot on Redis Cluster, and a hash tag in the operation key
// ({...}) places records as Redis Cluster does any key.
//
// # Record formats
//
// A record has one of two forms.
//
// The fast form is a string, and holds the first attempt of a key: in
// progress, or DONE by that attempt. A Claim of a new key writes it with
// one native command, no script:
//
//	SET <key> "~1i <token> <lease_ms> <retention_ms> <#fp> <#ids> <#reopen>\n<fp><ids><reopen>" NX PX <lease_ms+retention_ms>
//
// pipelined with PEXPIRETIME <key> in the same round trip. The header
// line gives the lease token, the lease and the retention, and the
// lengths in bytes of what follows it: the payload fingerprint, the trace
// and span IDs and the owner of the attempt (as the JSON members of its
// history entry) and the replay ID of a reopening claim. The record holds no clock
// reading: it expires lease_ms + retention_ms after the claim by the
// server's clock, so its lease ends at PEXPIRETIME - retention_ms (which
// Claim returns as Lease.Until) and the attempt started lease_ms before
// that. When the key exists (a record of either form) SET writes nothing
// and the claim script decides, in a second round trip; the script writes
// the same fast record for a key that expired meanwhile (its own SET NX
// ... GET), so it needs no other path for a new key.
//
// Complete turns an in-progress fast record into its DONE form, in a
// small script that checks the token first (fencing):
//
//	~1d <token> <lease_ms> <retention_ms> <#fp> <#ids> <#reopen> <started_ms> <kept_ms>\n<fp><ids><reopen><outcome>
//
// kept for kept_ms (the completing store's retention): the attempt ended
// at PEXPIRETIME - kept_ms. A duplicate Claim reads the outcome from it
// in the claim script (or Conflict, when the fingerprint differs), without
// a write. The token is the request ID of the Complete that wrote the
// record, so a re-sent Complete succeeds.
//
// The hash form holds every other record:
//
//	state     in_progress | done | failed | exhausted
//	fp        payload fingerprint of the first claim
//	token     current (or last) lease token
//	attempts  claims ever made; canceled: those refunded by a canceled release
//	until_ms  lease expiry (server clock, Unix ms) while in progress; absent
//	          or empty otherwise
//	outcome   JSON of idempotency.Outcome, once done
//	history   JSON array of the newest 20 attempts; a
//	          claim writes its attempt last, with its result as last member
//	req       ID of the last Complete or Release (makes a re-sent call safe)
//	nb_ms     retry-after time of a failed record (server clock, Unix ms):
//	          no claim acquires it before then; absent otherwise
//
// reopened_by and base (the replay that last reopened the record and the
// attempt count its budget started from) may be absent: no replay did.
//
// Every path other than a new key's claim runs a script: Complete, a
// claim of an existing key (a duplicate; a live lease, answered
// InProgress; a takeover after the lease expired; a conflicting payload;
// the same claim re-sent by go-redis; a retry of a FAILED record; a claim
// under a retry-after delay; an exhausted budget), Release and Extend. Such a script reads either form into the fields
// above; one that writes turns an in-progress fast record into a hash
// first (keeping its expiry) and goes on as on any hash. So a record is a
// string until its first attempt ends otherwise than DONE or is extended,
// and a hash from then on; Get reads both. Under WithBatching a claim is
// the claim script, which writes the same fast record for a new key.
//
// # Upgrading from a release without fast records
//
// Records written by earlier releases are hashes, which this release reads,
// completes, retries and releases as before (their history members may
// come in any order). The reverse does not hold: an earlier release's
// scripts fail with WRONGTYPE on a fast record. That failure is safe (the
// Claim or Complete returns an error, the message is nacked and delivered
// again; no second owner runs the handler), but it holds up the messages
// that an old process receives while a new process holds or completed
// them. Hence the upgrade rule: during a rolling upgrade, give every new
// process WithHashRecords, which writes hashes only (every claim then runs
// the claim script, as before); once no process of the earlier release
// runs, restart without it. Records written meanwhile stay hashes and are
// read as such.
//
// DONE, FAILED and EXHAUSTED records expire a retention (idempotency.WithRetention)
// after their last change; an IN_PROGRESS record a retention after its
// lease expiry (PEXPIRE lease+retention at each claim and extension), so it
// is never forgotten while leased, and an owner that died leaves a failure
// of unknown outcome that is forgotten like a FAILED one.
//
// # Clock, tokens and fencing
//
// Every time (lease expiry, attempt start and end) is the Redis server's
// clock (TIME inside the scripts, millisecond resolution), never the
// caller's. Lease tokens are 16 random bytes from crypto/rand in hex,
// generated by the client for each Claim: unguessable and unique without
// any shared counter. Complete, Release and Extend compare the token in the
// same script that writes, so a stale owner can change nothing.
//
// go-redis re-sends a command whose connection broke before the reply (its
// MaxRetries). The scripts recognise their own re-sent call (a Claim by its
// token, a Release by a per-call request ID, a Complete by its lease's
// token, which is its request ID) and answer it as the first time, instead
// of reporting the caller's own lease as another owner's. A lease ends with
// one Complete, so a Complete the caller itself retries after an error (the
// reply was lost, or its deadline passed while the script ran) is the same
// call too, and succeeds.
//
// # Round trips
//
// New loads the Lua scripts (SCRIPT LOAD, on every shard of a cluster) and
// reads the persistence settings. After that, a fresh message costs two
// round trips: Claim (SET NX and PEXPIRETIME, pipelined, no script) and
// Complete (one EVALSHA). A Claim of an existing key, a duplicate
// included, costs a second round trip, the claim script (one EVALSHA):
// go-redis handles the OK of a new key's SET NX at less client cost than
// the nil reply of SET NX ... GET, which would answer a duplicate in one
// round trip, and new keys are the common case. Release, Extend and Get
// are one EVALSHA each. When the server lost its script cache (restart,
// failover, SCRIPT FLUSH) the store gets NOSCRIPT, reloads the scripts
// and retries once, transparently. WithWaitReplicas adds one round trip
// to Claim and to Complete (WAIT).
//
// # Batching
//
// WithBatching(n) lets concurrent Claim and Complete calls share round
// trips, group-commit style: while fewer than two round trips of the store
// are in flight, a call is sent at once and alone (an idle store behaves
// and counts exactly as above: two round trips for a fresh message, one
// for a duplicate); the calls made while two are in flight are sent
// together in the next round trip, at most n of them. There is no timer,
// so no added latency when idle. On a single node (a *redis.Client,
// Sentinel included, whose server is not in cluster mode) a batch is one
// run of a batch script that runs each
// call's claim or complete code on its own key, in order, and answers each
// call with what its own script would have: a message still costs exactly
// one claim and one complete, and a call that fails on the server (a key
// of another type, say) fails alone. Each caller gets its own reply or
// error; a caller whose context ends returns at once (a call still queued
// is then never sent). NOSCRIPT reloads the scripts once and re-sends the
// batch. On a Cluster or Ring client a batch is a pipeline of one EVALSHA
// per call instead (a script's keys must share a slot), which go-redis
// splits by node. Release, Extend, Get, and a Claim or Complete under
// WithWaitReplicas are never batched. A batching store claims with the
// claim script, which shares the round trip; it writes the same fast
// records as an unbatched one.
//
// What batching saves is the per-command work around the scripts: the
// server's reads, writes and script invocations, and the client's system
// calls. It does not make the scripts' own work cheaper, which is what
// bounds a store on one Redis: see docs/BENCHMARKS.md for figures and for
// when batching pays.
//
// # Durability
//
// A DONE record is only as durable as the Redis that holds it. When Redis
// forgets a DONE record, the next delivery of that message runs the handler
// again: a duplicate effect. New reads INFO (and CONFIG GET appendfsync
// and save, when the server allows CONFIG), reports what it found in
// Store.Durability and logs a warning, saying how much, whenever a crash or
// restart of the server can forget acknowledged records: every setting
// below except AOF with appendfsync always (and an AOF whose fsync policy
// CONFIG GET does not reveal). The warning goes to slog.Default() unless
// idempotency.WithLogger is given. By configuration, from weakest to strongest:
//
//   - No persistence (no AOF, no RDB save points): any restart of the Redis
//     process forgets every record. Tests and caches only.
//   - RDB snapshots only: a restart forgets what was written since the last
//     snapshot (minutes, by the save points).
//   - AOF, appendfsync everysec (the usual production setting): a crash
//     of the Redis process or of its machine loses up to about two seconds
//     of records. While its once-a-second background fsync runs, Redis
//     holds back its AOF writes (up to 2 seconds) but still acknowledges
//     them, so a process crash then loses records already acknowledged;
//     otherwise a process crash loses nothing and a machine crash up to
//     about one second.
//   - AOF, appendfsync no: a process crash loses nothing (Redis has written
//     the record to the OS before it answers), a machine crash whatever the
//     OS had not flushed yet (typically up to about 30 seconds).
//   - AOF, appendfsync always: survives a machine crash too, at the cost of
//     an fsync per write on the server.
//   - WithWaitReplicas(n, timeout): Complete returns only after n replicas
//     acknowledged the DONE record (Redis WAIT), else an error wrapping
//     ErrNotReplicated; a failover to an acknowledged replica keeps it.
//     Claims are covered too: an acquired claim is acknowledged by n
//     replicas before the handler runs (else Claim releases it, refunded,
//     and fails with ErrNotReplicated), so a failover cannot forget a lease
//     and let a second owner run; and a Claim that finds a DONE record
//     answers Completed only once n replicas hold it (a write of its own,
//     rewriting the record with its own value, follows the record
//     in the replication stream, and WAIT confirms that write), so the
//     redelivery of a message whose Complete returned ErrNotReplicated is
//     not acked on the primary's word alone.
//     Replication is asynchronous otherwise: a failover can lose the last
//     writes whatever the primary's AOF. WAIT does not make Redis strongly
//     consistent (a replica can still be promoted without the write in rare
//     cases), and it costs one more round trip per Claim and per Complete
//     that lasts until the replicas answered.
//
// Eviction forgets records without any crash. A server with a maxmemory
// evicts keys when its memory is full unless its maxmemory-policy is
// noeviction: allkeys-* policies any key, volatile-* policies keys with a
// TTL, and every record has one (its lease, then its retention). An
// evicted DONE record lets a redelivery run the handler again (a
// duplicate); an evicted lease lets a second owner claim an operation
// whose handler still runs. Set maxmemory-policy noeviction on the store's
// server (a full server then refuses writes: Claim fails, and the
// middleware nacks the message until there is room), or give the store a
// server of its own, not a cache's. New reads maxmemory and
// maxmemory-policy from INFO memory (managed services that refuse CONFIG
// answer it too), reports them in Store.Durability, and logs a second
// warning for every policy that evicts records. Without a maxmemory (0,
// the default) the server evicts nothing and New does not warn, whatever
// the policy; Durability still shows it, for a health check that wants
// noeviction before someone sets a maxmemory.
//
// Each warning is logged once per server per process: the first store on
// a server logs it, a second store on the same server with the same
// settings does not (a service with several stores, or a test suite with
// hundreds, would flood its log), and its Durability reports the
// condition all the same. A server is one run of a redis-server (its
// INFO run_id), so a restarted or another server warns again, and so does
// the same server with other settings; a cluster's warning is logged again
// when one of its primaries had not had it. The settings are read once,
// by New: a CONFIG SET on the server afterwards goes unseen.
//
// For an effect that must never run twice whatever crashes, use the
// transactional inbox of idempotency/sqlstore instead: there the DONE mark
// commits with the effect.
//
// # Ownership
//
// The store never closes the client it was given, and has nothing to
// close: without WithBatching it starts no goroutine; with it, one
// goroutine sends the queued calls and ends as soon as the queue is
// empty. The caller closes the client after the last call to the store.
// Do not share the client with a Watermill redisstream subscriber, whose
// Close closes the client it was given.
package redisstore
