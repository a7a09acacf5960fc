package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/internal/record"
	"github.com/surely-dev/surely/internal/rediswait"
)

// defaultPrefix is the prefix of the store's keys unless WithPrefix
// names another.
const defaultPrefix = "surely:"

// ErrNotReplicated is returned (wrapped) under WithWaitReplicas when fewer
// replicas than asked acknowledged a record within the timeout:
//
//   - by Complete: the record is DONE on the primary; only its replication
//     is not confirmed. The caller should not ack.
//   - by Claim, for a claim it acquired: the claim was released (refunded,
//     as a canceled attempt) before Claim returned, so no handler runs on
//     a lease a failover could forget.
//   - by Claim, for a DONE record it found (a redelivery, typically after a
//     Complete that returned ErrNotReplicated): the record is not reported
//     Completed, so the message is not acked, until replicas hold it.
//
// The middleware treats it as an unavailable store: the message is nacked
// and redelivered.
var ErrNotReplicated = errors.New("redisstore: record not acknowledged by enough replicas")

// Store is an idempotency.Store on Redis. It is safe for concurrent use and
// keeps no state of its own besides its configuration: every record lives in
// Redis. It never closes the client it was given; close that client yourself
// after the last call to the store.
type Store struct {
	client      redis.UniversalClient
	prefix      string
	retention   time.Duration
	logger      *slog.Logger
	waitN       int
	waitTimeout time.Duration
	durability  Durability
	batch       *batcher // WithBatching; nil: every call is sent on its own
	hashRecords bool     // WithHashRecords
}

// Names of the store's own options.
const (
	optPrefix       = "WithPrefix"
	optWaitReplicas = "WithWaitReplicas"
	optHashRecords  = "WithHashRecords"
	optBatching     = "WithBatching"
)

// WithPrefix sets the prefix of every key the store writes (default
// "surely:"). A record's key is prefix + namespace + ":" + operation key.
// Do not put a hash tag ({...}) in the prefix on Redis Cluster: it would put
// every record in one slot.
func WithPrefix(prefix string) idempotency.Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		if prefix == "" {
			return fmt.Errorf("%w: redisstore: empty key prefix", idempotency.ErrInvalidOption)
		}
		s.Put(optPrefix, prefix)
		return nil
	})
}

// WithWaitReplicas makes Claim and Complete wait until n replicas
// acknowledged the record (Redis WAIT n timeout), and return an error
// wrapping ErrNotReplicated when fewer did within timeout: an acquired
// claim, a DONE record written by Complete, and a DONE record a Claim
// found (see ErrNotReplicated). It costs one more round trip per Claim and
// per Complete, which lasts until the replicas answered (up to timeout);
// give the middleware's store timeout room for it. WAIT is sent on the
// connection that wrote the record, as Redis requires; this needs a
// *redis.Client (single node, Sentinel) or a *redis.ClusterClient. Claims
// and Completes under this option are never batched.
func WithWaitReplicas(n int, timeout time.Duration) idempotency.Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		w, err := rediswait.New(n, timeout)
		if err != nil {
			return fmt.Errorf("%w: redisstore: %w", idempotency.ErrInvalidOption, err)
		}
		s.Put(optWaitReplicas, w)
		return nil
	})
}

// WithHashRecords makes the store write every record as a hash, the only
// form that releases before the fast records knew, and claim every key
// with the claim script: the upgrade rule of doc.go ("Record formats").
// Give it to every process of a rolling upgrade from such a release, and
// drop it once none of them runs. The store reads and completes records of
// both forms either way.
func WithHashRecords() idempotency.Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		s.Put(optHashRecords, true)
		return nil
	})
}

// New returns a store on client. It loads the store's Lua scripts (SCRIPT
// LOAD), so that every later call is a single EVALSHA, and reads the
// server's persistence and eviction settings (see Durability), logging a
// warning when a crash or restart of the server can forget acknowledged
// DONE records, and one when a full server evicts records (any
// maxmemory-policy but noeviction, with a maxmemory), to slog.Default()
// unless idempotency.WithLogger is given. Each warning is logged once per
// server per process: a second store on the same server with the same
// settings logs nothing, and Durability reports the condition all the
// same. It fails when the server cannot be reached or refuses the scripts.
//
// Options: WithPrefix, WithBatching, WithWaitReplicas, WithHashRecords, and
// of the common ones idempotency.WithRetention (default 24h,
// at least 1ms; Redis expires the records with PEXPIRE) and
// idempotency.WithLogger (default slog.Default(); the store logs only
// warnings: the durability warnings of New and script reloads). Any other
// option (idempotency.WithClock: the store's times come from the server's
// clock) is an error wrapping idempotency.ErrInvalidOption. Options are
// checked before the server is asked.
//
// The store never closes client: the caller owns it and closes it after the
// last call to the store. Do not share it with a Watermill redisstream
// subscriber, whose Close closes the client it was given.
func New(ctx context.Context, client redis.UniversalClient, opts ...idempotency.Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: nil client", idempotency.ErrInvalidOption)
	}
	set, err := options.Apply(idempotency.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(idempotency.ErrInvalidOption, "redisstore.New",
		optPrefix, options.Retention, options.Logger, optWaitReplicas, optHashRecords, optBatching); err != nil {
		return nil, err
	}
	wait := options.Get(set, optWaitReplicas, rediswait.Replicas{})
	s := &Store{
		client:      client,
		prefix:      options.Get(set, optPrefix, defaultPrefix),
		retention:   options.Get(set, options.Retention, defaults.Retention),
		logger:      options.Get(set, options.Logger, slog.Default()),
		waitN:       wait.N,
		waitTimeout: wait.Timeout,
		hashRecords: options.Get(set, optHashRecords, false),
	}
	if s.retention < time.Millisecond {
		return nil, fmt.Errorf("%w: redisstore: retention must be at least 1ms, got %v", idempotency.ErrInvalidOption, s.retention)
	}
	if n := options.Get(set, optBatching, 0); n > 0 {
		s.batch = &batcher{s: s, max: n}
	}
	if s.waitN > 0 {
		if err := rediswait.Supported(client); err != nil {
			return nil, fmt.Errorf("%w: redisstore: WithWaitReplicas: %w", idempotency.ErrInvalidOption, err)
		}
	}
	if err := loadScripts(ctx, client); err != nil {
		return nil, err
	}
	if s.batch != nil {
		s.batch.oneScript = singleNode(ctx, client)
	}
	d, servers := checkDurability(ctx, client)
	d.WaitReplicas = s.waitN
	s.durability = d
	warnDurability(ctx, s.logger, d, servers)
	return s, nil
}

var _ idempotency.Store = (*Store)(nil)

// Durability returns what New found about the server's persistence and
// eviction, and the replicas the store waits for.
func (s *Store) Durability() Durability { return s.durability }

// redisKey is the one key of an operation's record.
func (s *Store) redisKey(namespace, key string) string {
	return s.prefix + namespace + ":" + key
}

// newID returns 16 random bytes in hex: lease tokens and request IDs.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// ms rounds d up to whole milliseconds, Redis's resolution.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func fromMs(v int64) time.Time { return record.FromMs(v) }

// histEntry is one attempt as stored in the record's history field (JSON,
// written by the Lua scripts with cjson). Times are milliseconds of the
// server clock.
type histEntry = record.Entry[float64]

func decodeHistory(s string) ([]idempotency.AttemptRecord, error) {
	if s == "" || s == "[]" || s == "{}" { // cjson writes an empty table as {}
		return nil, nil
	}
	var hs []histEntry
	if err := json.Unmarshal([]byte(s), &hs); err != nil {
		return nil, fmt.Errorf("redisstore: decode history: %w", err)
	}
	return record.Attempts(hs), nil
}

func decodeOutcome(s string) (*idempotency.Outcome, error) {
	o := &idempotency.Outcome{}
	if s == "" {
		return o, nil
	}
	if err := json.Unmarshal([]byte(s), o); err != nil {
		return nil, fmt.Errorf("redisstore: decode outcome: %w", err)
	}
	return o, nil
}

// Claim implements idempotency.Store. A new key costs one round trip of
// two native commands and no script; an existing key (a duplicate, a
// retry, a live lease, ...) a second round trip, the claim script (see
// doc.go, "Record formats"). Under WithBatching every claim is the claim
// script, batched.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	if err := req.Validate(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	token := newID()
	if s.waitN > 0 {
		return s.claimAndWait(ctx, req, token)
	}
	key, args := s.redisKey(req.Namespace, req.Key), s.claimArgs(req, token)
	if s.batch == nil && !s.hashRecords {
		res, ok, err := s.fastClaim(ctx, s.client, key, args, req, token)
		if ok || err != nil {
			return res, err
		}
	}
	// The claim script: the rare paths, and every claim of a batching
	// store, where the script shares a round trip with other calls.
	v, err := s.send(ctx, scriptCall{sc: scriptClaim, key: key, args: args})
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	return claimResult(v, req, token)
}

// claimArgs are the arguments of the claim script (see lua/claim.lua).
func (s *Store) claimArgs(req idempotency.ClaimRequest, token string) []any {
	lease, retention := ms(req.Lease), ms(s.retention)
	ids := historyIDs(req.TraceID, req.SpanID, req.Owner)
	fast := ""
	if !s.hashRecords {
		fast = fastRecord(req, token, lease, retention, ids)
	}
	return []any{req.Fingerprint, lease, req.MaxAttempts, token, retention, lease + retention,
		defaults.MaxHistory, ids, req.Reopen, fast}
}

// Argument positions in claimArgs.
const (
	argTTL  = 5 // lease_ms + retention_ms
	argFast = 9 // the fast record
)

// fastRecord is the record of a new key's first attempt, in progress, in
// its fast form (see doc.go and lua/prelude.lua): a header line, then the
// fingerprint, the history IDs and the replay ID, of the lengths the
// header gives.
func fastRecord(req idempotency.ClaimRequest, token string, lease, retention int64, ids string) string {
	var b strings.Builder
	b.Grow(64 + len(token) + len(req.Fingerprint) + len(ids) + len(req.Reopen))
	b.WriteString("~1i ")
	b.WriteString(token)
	for _, n := range [...]int64{lease, retention, int64(len(req.Fingerprint)), int64(len(ids)), int64(len(req.Reopen))} {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte('\n')
	b.WriteString(req.Fingerprint)
	b.WriteString(ids)
	b.WriteString(req.Reopen)
	return b.String()
}

// pipeliner is what fastClaim sends its round trip on: a client or one
// connection (WithWaitReplicas).
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// fastClaim claims a new key without a script, in one round trip of two
// native commands:
//
//	SET <key> <fast record> NX PX <lease+retention>
//	PEXPIRETIME <key>
//
// SET writes the record when the key is free; the lease then ends a
// retention before the key expires, by the server's clock. ok is false
// when the key exists (or SET failed on the server): the claim script
// decides then, a duplicate included.
//
// SET answers OK for a new key, which go-redis handles at less cost than
// the nil reply of SET ... GET as the first reply of a pipeline (some 20
// allocations for its retry checks): a new key is the common case, so a
// duplicate pays the second round trip instead.
func (s *Store) fastClaim(ctx context.Context, c pipeliner, key string, args []any, req idempotency.ClaimRequest, token string) (res idempotency.ClaimResult, ok bool, err error) {
	var set, exp *redis.Cmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.Do(ctx, "set", key, args[argFast], "nx", "px", args[argTTL])
		exp = p.Do(ctx, "pexpiretime", key)
		return nil
	})
	switch err := set.Err(); {
	case err == nil:
	case errors.Is(err, redis.Nil) || isServerError(err):
		// The key exists. Or a refused write (OOM, READONLY, ...): the
		// script answers a duplicate from the record all the same.
		return res, false, nil
	default:
		return res, false, fmt.Errorf("redisstore: claim: %w", err)
	}
	at, err := exp.Int64()
	if err != nil {
		return res, false, fmt.Errorf("redisstore: claim: PEXPIRETIME: %w", err)
	}
	lease := idempotency.Lease{Namespace: req.Namespace, Key: req.Key, Token: token, Attempt: 1, Until: fromMs(at - ms(s.retention))}
	return idempotency.ClaimResult{Status: idempotency.Acquired, Lease: lease}, true, nil
}

// isServerError reports whether err is an error reply of the server,
// rather than a failure to reach it.
func isServerError(err error) bool {
	var e redis.Error
	return errors.As(err, &e) && !errors.Is(err, redis.Nil)
}

// historyIDs returns the trace and span IDs and the owner of a claim's
// attempt as the JSON members the claim script adds to its history entry,
// each only when set: ,"trace_id":"…","span_id":"…","owner":"…". The
// script appends them as they are, which spares it encoding JSON.
func historyIDs(traceID, spanID, owner string) string {
	var b strings.Builder
	b.Grow(len(`,"trace_id":"","span_id":"","owner":""`) + len(traceID) + len(spanID) + len(owner))
	member := func(name, v string) {
		if v == "" {
			return
		}
		b.WriteString(`,"`)
		b.WriteString(name)
		b.WriteString(`":`)
		if plainJSON(v) {
			// Hex IDs and most owners: the encoding is the text quoted.
			b.WriteByte('"')
			b.WriteString(v)
			b.WriteByte('"')
			return
		}
		q, _ := json.Marshal(v) // a string always encodes
		b.Write(q)
	}
	member("trace_id", traceID)
	member("span_id", spanID)
	member("owner", owner)
	return b.String()
}

// plainJSON reports whether json.Marshal encodes s as s in quotes: printable
// ASCII without a quote, a backslash or one of the characters it escapes
// for HTML.
func plainJSON(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// claimResult reads the claim script's reply v to a claim under token. The
// two common answers are bare values: an integer is the lease expiry of the
// first attempt of a new key, a string the outcome of a DONE record; every
// other answer is an array naming itself first.
func claimResult(v any, req idempotency.ClaimRequest, token string) (idempotency.ClaimResult, error) {
	lease := idempotency.Lease{Namespace: req.Namespace, Key: req.Key, Token: token}
	switch v := v.(type) {
	case int64:
		lease.Attempt, lease.Until = 1, fromMs(v)
		return idempotency.ClaimResult{Status: idempotency.Acquired, Lease: lease}, nil
	case string:
		o, err := decodeOutcome(v)
		if err != nil {
			return idempotency.ClaimResult{}, err
		}
		return idempotency.ClaimResult{Status: idempotency.Completed, Outcome: o}, nil
	}
	r, err := replyOf(v)
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	var res idempotency.ClaimResult
	switch r.str(0) {
	case "conflict":
		res = idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: r.str(1)}
	case "in_progress":
		res = idempotency.ClaimResult{Status: idempotency.InProgress, Until: fromMs(r.int(1)), Wait: time.Duration(r.int(2)) * time.Millisecond}
	case "exhausted":
		h, err := decodeHistory(r.str(2))
		if err != nil {
			return idempotency.ClaimResult{}, err
		}
		res = idempotency.ClaimResult{Status: idempotency.Exhausted, Attempts: int(r.int(1)), History: h}
	case "acquired":
		lease.Attempt, lease.Until = int(r.int(1)), fromMs(r.int(2))
		res = idempotency.ClaimResult{
			Status:   idempotency.Acquired,
			Lease:    lease,
			Previous: idempotency.AttemptResult(r.str(3)),
		}
		if res.Previous == idempotency.ResultFailed {
			res.PreviousError = r.str(4)
		}
	default:
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: unexpected reply %v", v)
	}
	if r.err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", r.err)
	}
	return res, nil
}

// owns reports whether lease can name a record: an empty token or a
// namespace that Claim would refuse never matches one.
func owns(lease idempotency.Lease) bool {
	return lease.Token != "" && idem.ValidateNamespace(lease.Namespace) == nil
}

// Complete implements idempotency.Store in one round trip (EVALSHA), two
// with WithWaitReplicas.
//
// A Complete after the lease expired still succeeds while nobody else has
// claimed the key (the token is still current): the effect did commit. A
// Complete re-sent with the lease that completed the record succeeds and
// changes nothing.
func (s *Store) Complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !owns(lease) {
		return idempotency.ErrLeaseLost
	}
	out, err := json.Marshal(outcome)
	if err != nil {
		return fmt.Errorf("redisstore: encode outcome: %w", err)
	}
	key := s.redisKey(lease.Namespace, lease.Key)
	// The request ID of a Complete is its lease's token: a lease ends with
	// one Complete, so every re-send of it, by go-redis or by the caller
	// after an error, is recognised as the call that was applied.
	args := []any{lease.Token, lease.Token, out, ms(s.retention)}
	if s.waitN > 0 {
		return s.completeAndWait(ctx, key, args)
	}
	v, err := s.send(ctx, scriptCall{sc: scriptComplete, key: key, args: args})
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	return okOrLost(v)
}

// primaryConn returns a connection to the primary that holds key. WAIT
// counts the replicas that acknowledged the writes of its own connection,
// so a write and its WAIT must share one. New refuses WithWaitReplicas on
// a client that cannot give one.
func (s *Store) primaryConn(ctx context.Context, key string) (*redis.Conn, error) {
	return rediswait.PrimaryConn(ctx, s.client, key)
}

// completeAndWait runs the Complete script and then WAIT on one connection.
func (s *Store) completeAndWait(ctx context.Context, key string, args []any) error {
	conn, err := s.primaryConn(ctx, key)
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	defer func() { _ = conn.Close() }()
	v, err := s.evalSha(ctx, conn, scriptComplete, key, args...)
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if err := okOrLost(v); err != nil {
		return err
	}
	if err := s.wait(ctx, conn, ""); err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	return nil
}

// releaseTimeout bounds the release of a claim that was not replicated,
// which runs even when the caller's context has ended.
const releaseTimeout = 5 * time.Second

// claimAndWait runs the Claim script and, for an acquired claim or a DONE
// record, WAIT on the same connection (see ErrNotReplicated). An acquired
// claim that is not replicated is released as canceled (not charged to the
// budget); when that release fails too, the claim stays until its lease
// expires.
func (s *Store) claimAndWait(ctx context.Context, req idempotency.ClaimRequest, token string) (idempotency.ClaimResult, error) {
	key := s.redisKey(req.Namespace, req.Key)
	conn, err := s.primaryConn(ctx, key)
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	defer func() { _ = conn.Close() }()
	args := s.claimArgs(req, token)
	var (
		res idempotency.ClaimResult
		ok  bool
	)
	if !s.hashRecords {
		if res, ok, err = s.fastClaim(ctx, conn, key, args, req, token); err != nil {
			return idempotency.ClaimResult{}, err
		}
	}
	if !ok {
		v, err := s.evalSha(ctx, conn, scriptClaim, key, args...)
		if err != nil {
			return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
		}
		if res, err = claimResult(v, req, token); err != nil {
			return idempotency.ClaimResult{}, err
		}
	}
	switch res.Status {
	case idempotency.Acquired:
		if err := s.wait(ctx, conn, ""); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			defer cancel()
			rerr := s.Release(rctx, res.Lease, idempotency.Failure{Canceled: true, Error: err.Error()})
			return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", errors.Join(err, rerr))
		}
	case idempotency.Completed:
		// The record was written on another connection: a write of this
		// one that follows it in the replication stream makes WAIT count
		// only the replicas that hold it.
		if err := s.wait(ctx, conn, key); err != nil {
			return idempotency.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
		}
	}
	return res, nil
}

// confirmDone rewrites a DONE record (the state of a hash, the whole of a
// fast record) with its own value: a no-op that Redis still replicates
// after the record, so a WAIT on the same connection confirms the record.
// It touches nothing else (the TTL stays) and writes nothing when the
// record is gone or not DONE.
const confirmDone = `local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'hash' then
  if redis.call('HGET', KEYS[1], 'state') == 'done' then redis.call('HSET', KEYS[1], 'state', 'done') end
elseif t == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, 1, 4) == '~1d ' then redis.call('SET', KEYS[1], v, 'KEEPTTL') end
end
return 1`

// wait sends WAIT on conn, after confirmDone on doneKey when it is set (in
// one round trip), and returns an error wrapping ErrNotReplicated when
// fewer than waitN replicas acknowledged within waitTimeout.
func (s *Store) wait(ctx context.Context, conn *redis.Conn, doneKey string) error {
	var (
		n   int64
		err error
	)
	if doneKey == "" {
		n, err = conn.Wait(ctx, s.waitN, s.waitTimeout).Result()
	} else {
		var acked *redis.Cmd
		_, err = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Eval(ctx, confirmDone, []string{doneKey})
			// The pipeline has no Wait method: the same command by name.
			acked = p.Do(ctx, "wait", s.waitN, ms(s.waitTimeout))
			return nil
		})
		if err == nil {
			n, err = acked.Int64()
		}
	}
	if err != nil {
		return fmt.Errorf("WAIT: %w", err)
	}
	if n < int64(s.waitN) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, s.waitN, s.waitTimeout)
	}
	return nil
}

// Release implements idempotency.Store in one round trip (EVALSHA).
func (s *Store) Release(ctx context.Context, lease idempotency.Lease, f idempotency.Failure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !owns(lease) {
		return idempotency.ErrLeaseLost
	}
	v, err := s.evalSha(ctx, s.client, scriptRelease, s.redisKey(lease.Namespace, lease.Key),
		lease.Token, newID(), ms(s.retention), flag(f.Canceled), flag(f.Final),
		idem.Truncate(f.Error, defaults.MaxErrorLen), f.ErrorType, f.Reason,
		idem.Truncate(f.Stack, defaults.MaxStackLen), ms(max(f.RetryAfter, 0)))
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	return okOrLost(v)
}

// Extend implements idempotency.Store in one round trip (EVALSHA).
func (s *Store) Extend(ctx context.Context, lease idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lease, err
	}
	if err := record.CheckExtension(d); err != nil {
		return lease, err
	}
	if !owns(lease) {
		return lease, idempotency.ErrLeaseLost
	}
	v, err := s.evalSha(ctx, s.client, scriptExtend, s.redisKey(lease.Namespace, lease.Key),
		lease.Token, ms(d), ms(s.retention))
	if err != nil {
		return lease, fmt.Errorf("redisstore: extend: %w", err)
	}
	until, ok := v.(int64)
	if !ok {
		return lease, fmt.Errorf("redisstore: extend: unexpected reply %v", v)
	}
	if until == 0 {
		return lease, idempotency.ErrLeaseLost
	}
	lease.Until = fromMs(until)
	return lease, nil
}

// Get implements idempotency.Store in one round trip (EVALSHA). ExpiresAt
// is when Redis will forget the record (its PEXPIRE), also while it is in
// progress.
func (s *Store) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, err
	}
	if idem.ValidateNamespace(namespace) != nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	v, err := s.evalSha(ctx, s.client, scriptGet, s.redisKey(namespace, key))
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	return recordOf(namespace, key, v)
}

// recordOf decodes the reply of the Get script for (namespace, key), or
// returns ErrNotFound for an empty one.
func recordOf(namespace, key string, v any) (idempotency.Record, error) {
	r, err := replyOf(v)
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	if len(r.vals) == 0 {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	rec := idempotency.Record{
		Namespace:   namespace,
		Key:         key,
		State:       idempotency.State(r.str(0)),
		Fingerprint: r.str(1),
		Token:       r.str(2),
		Attempts:    int(r.int(3)),
		Canceled:    int(r.int(4)),
		LeaseUntil:  fromMs(r.int(5)),
		ExpiresAt:   fromMs(r.int(8)),
		ReopenedBy:  r.str(9),
		BudgetBase:  int(r.int(10)),
		NotBefore:   fromMs(r.int(11)),
	}
	if rec.State == idempotency.StateDone {
		if rec.Outcome, err = decodeOutcome(r.str(6)); err != nil {
			return idempotency.Record{}, err
		}
	}
	if rec.History, err = decodeHistory(r.str(7)); err != nil {
		return idempotency.Record{}, err
	}
	if r.err != nil {
		return idempotency.Record{}, fmt.Errorf("redisstore: get: %w", r.err)
	}
	return rec, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func okOrLost(v any) error {
	switch v {
	case int64(1):
		return nil
	case int64(0):
		return idempotency.ErrLeaseLost
	default:
		return fmt.Errorf("redisstore: unexpected reply %v", v)
	}
}

// reply reads a script's array reply; the first malformed field sets err.
type reply struct {
	vals []any
	err  error
}

func replyOf(v any) (*reply, error) {
	vals, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	return &reply{vals: vals}, nil
}

func (r *reply) str(i int) string {
	if i >= len(r.vals) || r.vals[i] == nil {
		return ""
	}
	switch v := r.vals[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	if r.err == nil {
		r.err = fmt.Errorf("reply field %d: unexpected %T", i, r.vals[i])
	}
	return ""
}

func (r *reply) int(i int) int64 {
	if i >= len(r.vals) || r.vals[i] == nil {
		return 0
	}
	switch v := r.vals[i].(type) {
	case int64:
		return v
	case string:
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			return n
		}
	}
	if r.err == nil {
		r.err = fmt.Errorf("reply field %d: unexpected %v", i, r.vals[i])
	}
	return 0
}

// Retention is how long DONE, FAILED and EXHAUSTED records are kept
// (idempotency.RetentionReporter).
func (s *Store) Retention() time.Duration { return s.retention }
