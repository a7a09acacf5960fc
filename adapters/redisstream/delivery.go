package redisstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/delivery"
)

// Metadata keys of a message that could not be decoded, besides
// delivery.KeyDecodeError (the decoding error). Its payload is the raw
// "payload" field of the entry (empty if it has none), and its metadata
// holds only these keys. surely's chain dead-letters it with reason
// "decode".
const (
	// keyDecodeFields holds the entry's other fields as a JSON object:
	// field name to its value, a JSON string when the value is valid
	// UTF-8, else {"base64": "<standard base64>"}.
	keyDecodeFields = "surely_decode_fields"
	// keyDecodeEntryID holds the stream entry ID of the undecodable entry.
	keyDecodeEntryID = "surely_decode_entry_id"
)

// Fields the hook adds to an entry read from the stream, so that the
// Unmarshaler learns what watermill-redisstream does not pass it. The NUL
// prefix keeps them apart from any field a publisher writes.
const (
	fieldID      = "\x00surely_entry_id"
	fieldClaimed = "\x00surely_claimed"
)

// Metadata keys the unmarshaler sets and the relay removes before handing
// the message out; they survive watermill-redisstream's msg.Copy() on a
// nack, where the context does not.
const (
	mdID      = "_surely_redis_entry_id"
	mdRead    = "_surely_redis_read"
	mdClaimed = "_surely_redis_claimed"
)

// entryHook tags every entry that XREADGROUP or XCLAIM returns with its
// stream ID (and whether it was claimed), in the entry's field map: the
// very map watermill-redisstream then hands to the Unmarshaler.
//
// It also lets Close shut watermill-redisstream down cleanly. Once the
// subscriber is closing, an XREADGROUP returns redis.Nil at once (the read
// loop then sees the closing and ends) and an XCLAIM fails, so a closing
// consumer takes no new entry; Close waits for the XREADGROUPs in flight
// before it closes the client. Otherwise the read loop gets "client is
// closed", sleeps 500ms and outlives Close.
//
// And it drops watermill-redisstream's XACK of an entry the subscriber
// postponed (see Subscriber.postpone): that entry stays pending.
type entryHook struct {
	closing   <-chan struct{}
	reading   *atomic.Int64 // XREADGROUP calls in flight
	postponed *sync.Map     // postponedKey of entries whose next XACK is dropped
}

// ownAck marks the context of the subscriber's own XACK, which the hook
// never drops.
type ownAck struct{}

func postponedKey(stream, id string) string { return stream + "\x00" + id }

func (entryHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (entryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h entryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.XStreamSliceCmd:
			if c.Name() == "xreadgroup" {
				return h.readGroup(ctx, c, next)
			}
		case *redis.IntCmd:
			if c.Name() == "xack" && ctx.Value(ownAck{}) == nil {
				return h.ack(ctx, c, next)
			}
		case *redis.XMessageSliceCmd:
			if c.Name() == "xclaim" {
				return h.claim(ctx, c, next)
			}
		}
		return next(ctx, cmd)
	}
}

// readGroup runs an XREADGROUP, counted in reading, and tags the entries
// it returns; a closing subscriber gets redis.Nil without a read.
func (h entryHook) readGroup(ctx context.Context, c *redis.XStreamSliceCmd, next redis.ProcessHook) error {
	h.reading.Add(1)
	defer h.reading.Add(-1)
	select {
	case <-h.closing:
		c.SetErr(redis.Nil)
		return redis.Nil
	default:
	}
	if err := next(ctx, c); err != nil {
		return err
	}
	for _, xs := range c.Val() {
		for i := range xs.Messages {
			tag(&xs.Messages[i], false)
		}
	}
	return nil
}

// ack runs watermill-redisstream's XACK unless its entry was postponed:
// then it acknowledges nothing and the entry stays pending.
func (h entryHook) ack(ctx context.Context, c *redis.IntCmd, next redis.ProcessHook) error {
	// watermill-redisstream's XACK: stream, group, one ID.
	if args := c.Args(); len(args) == 4 {
		stream, _ := args[1].(string)
		id, _ := args[3].(string)
		if _, ok := h.postponed.LoadAndDelete(postponedKey(stream, id)); ok {
			c.SetVal(0)
			return nil
		}
	}
	return next(ctx, c)
}

// claim runs an XCLAIM and tags the entries it returns as claimed; a
// closing subscriber fails it without a claim.
func (h entryHook) claim(ctx context.Context, c *redis.XMessageSliceCmd, next redis.ProcessHook) error {
	select {
	case <-h.closing:
		// A closing subscriber takes no entry it will not hand
		// out. Not redis.Nil: watermill-redisstream acks those.
		c.SetErr(errClosing)
		return errClosing
	default:
	}
	if err := next(ctx, c); err != nil {
		return err
	}
	msgs := c.Val()
	for i := range msgs {
		tag(&msgs[i], true)
	}
	return nil
}

var errClosing = errors.New("redisstream: subscriber closing")

// sharedClient is the client as watermill-redisstream gets it: its Close,
// which watermill-redisstream calls before its read loop has ended, does
// nothing; Subscriber.Close closes the client after that loop.
type sharedClient struct{ redis.UniversalClient }

func (sharedClient) Close() error { return nil }

func tag(xm *redis.XMessage, claimed bool) {
	if xm.Values == nil { // the entry was deleted from the stream
		xm.Values = map[string]any{}
	}
	xm.Values[fieldID] = xm.ID
	if claimed {
		xm.Values[fieldClaimed] = "1"
	}
}

// unmarshaler wraps the configured Unmarshaler: it never fails (an error,
// a panic or no message marks the message undecodable instead, since
// watermill-redisstream ends the subscription silently on an error), and
// records the entry ID, a read number and whether the entry was claimed in
// the message's metadata for the relay.
type unmarshaler struct {
	inner wmredis.Unmarshaller
	reads *atomic.Uint64
}

func (u unmarshaler) Unmarshal(values map[string]any) (*message.Message, error) {
	id, _ := values[fieldID].(string)
	_, claimed := values[fieldClaimed]
	delete(values, fieldID)
	delete(values, fieldClaimed)
	msg, err := decode(u.inner, values)
	if err != nil {
		msg = undecodable(id, values, err)
	}
	msg.Metadata.Set(mdID, id)
	msg.Metadata.Set(mdRead, strconv.FormatUint(u.reads.Add(1), 10))
	if claimed {
		msg.Metadata.Set(mdClaimed, "1")
	}
	return msg, nil
}

// decode runs u on values, turning a panic or a nil message into an error.
func decode(u wmredis.Unmarshaller, values map[string]any) (msg *message.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, fmt.Errorf("unmarshaler panicked: %v", p)
		}
	}()
	msg, err = u.Unmarshal(values)
	if err == nil && msg == nil {
		err = errors.New("unmarshaler returned no message")
	}
	if err == nil && msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	return msg, err
}

// undecodable builds the marked message of an entry that could not be
// decoded. Its UUID is the entry's Watermill UUID field when it has one,
// else "redis-<entry ID>", stable across redeliveries.
func undecodable(id string, values map[string]any, err error) *message.Message {
	uuid, _ := values[wmredis.UUIDHeaderKey].(string)
	if uuid == "" {
		uuid = "redis-" + id
	}
	var payload []byte
	if p, ok := values["payload"].(string); ok {
		payload = []byte(p)
	}
	msg := message.NewMessage(uuid, payload)
	msg.Metadata.Set(delivery.KeyDecodeError, err.Error())
	msg.Metadata.Set(keyDecodeEntryID, id)
	fields := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(values)) {
		if k == "payload" {
			continue
		}
		switch v := values[k].(type) {
		case string:
			if utf8.ValidString(v) {
				fields[k] = v
			} else {
				fields[k] = map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(v))}
			}
		default:
			fields[k] = fmt.Sprint(v)
		}
	}
	if len(fields) > 0 {
		if b, jerr := json.Marshal(fields); jerr == nil {
			msg.Metadata.Set(keyDecodeFields, string(b))
		}
	}
	return msg
}

// touchScript resets the idle time of a pending entry that this consumer
// owns, and with ARGV[4] == "1" counts one more delivery of it. It returns
// the entry's delivery count, -1 when the entry is not pending, -2 when
// another consumer owns it. XCLAIM with JUSTID does not count a delivery
// by itself; RETRYCOUNT sets the count.
var touchScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return -1 end
if p[1][2] ~= ARGV[2] then return -2 end
local n = p[1][4]
if ARGV[4] == '1' then n = n + 1 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', n, 'JUSTID')
return n
`)

// touch runs touchScript for entry id of stream.
func (s *Subscriber) touch(ctx context.Context, stream, id string, count bool) (int, error) {
	arg := "0"
	if count {
		arg = "1"
	}
	n, err := touchScript.Run(ctx, s.client, []string{stream}, s.cfg.group, s.cfg.consumer, id, arg).Int()
	switch {
	case err != nil:
		return 0, fmt.Errorf("redisstream: touch entry %s of %s: %w", id, stream, err)
	case n == -1:
		return 0, fmt.Errorf("%w: %s of %s", errNotPending, id, stream)
	case n == -2:
		return 0, fmt.Errorf("%w: %s of %s", errClaimed, id, stream)
	}
	return n, nil
}

// pendingCount is the delivery count of a pending entry, from the group's
// pending entries list; 0 when it cannot be read.
func (s *Subscriber) pendingCount(ctx context.Context, stream, id string) int {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	p, err := s.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: s.cfg.group, Start: id, End: id, Count: 1,
	}).Result()
	if err != nil || len(p) == 0 {
		return 0
	}
	return int(p[0].RetryCount)
}

// received is one delivery as the subscriber handed it out: its
// delivery.Control.
type received struct {
	s      *Subscriber
	stream string
	id     string
	delay  atomic.Int64 // NackAfter's delay in ns; -1 when not asked
}

var _ delivery.Control = (*received)(nil)

func newReceived(s *Subscriber, stream, id string) *received {
	r := &received{s: s, stream: stream, id: id}
	r.delay.Store(-1)
	return r
}

// NackAfter makes the nack that follows redeliver the message no sooner
// than d, and always reports true. Up to holdLimit, the subscriber holds
// the message for d (instead of the resend interval), keeping the entry
// claimed, and then hands it out again; the subscription hands out nothing
// else meanwhile (watermill-redisstream serves one entry at a time). A
// longer d is not held: the entry stays pending, unacked, and the
// subscription goes on with the next entry after the resend interval; a
// consumer of the group claims the entry once it was idle for the ack
// wait. That is d at the earliest when d <= the ack wait; for a longer d,
// the claim comes early: for a retry.After(d), surely's dedup store (the
// failure's not-before time) answers it with an uncharged InProgress,
// postponed in turn, until d has passed, so the message comes back
// between d and about d + ack wait + claim interval after the nack; a
// longer backoff delay (MaxInProcessTime above the ack wait), which is no
// promise, is cut to the ack wait.
func (r *received) NackAfter(d time.Duration) bool {
	r.delay.Store(int64(max(d, 0)))
	return true
}

// resendDelay is how long to hold the message after a nack.
func (r *received) resendDelay() time.Duration {
	if d := r.delay.Load(); d >= 0 {
		return time.Duration(d)
	}
	return r.s.cfg.nackResendSleep
}

// Extend resets the entry's idle time, so that no other consumer claims
// it while the handler runs. It fails with errClaimed when another
// consumer already did, and errNotPending when the entry was acked.
func (r *received) Extend(ctx context.Context) error {
	if r.id == "" {
		return fmt.Errorf("%w: no entry ID", errNotPending)
	}
	_, err := r.s.touch(ctx, r.stream, r.id, false)
	return err
}
