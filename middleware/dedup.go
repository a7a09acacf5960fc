package middleware

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/retry"
)

type dedupConfig struct {
	lease        time.Duration
	maxAttempts  int
	extendEvery  time.Duration
	maxHeld      time.Duration
	storeTimeout time.Duration
	redact       func(text string) string
	logger       *slog.Logger
}

// extension is the value of withExtension.
type extension struct{ every, maxHeld time.Duration }

// WithLease sets the lease of a claim (default 30s, at least 10ms). The
// lease is extended every third of it while the handler runs, for at most
// 10 leases in all (past that the handler is deemed hung: its context is
// canceled with cause ErrHandlerHung, and the lease is left to expire, so
// another consumer may take the operation over; the attempt counts as a
// failure, so a message that hangs every time ends EXHAUSTED and
// dead-lettered). The lease bounds how long a crashed owner blocks the
// operation. Taken by Dedup.
func WithLease(d time.Duration) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		return s.PutAtLeast(ErrInvalidOption, optLease, "lease", d, defaults.MinLease)
	})
}

// WithMaxAttempts sets the durable attempt budget (default 5, as
// retry.WithMaxAttempts), counted by the store across deliveries and
// process crashes. Taken by Dedup.
func WithMaxAttempts(n int) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: max attempts must be at least 1, got %d", ErrInvalidOption, n)
		}
		s.Put(optMaxAttempts, n)
		return nil
	})
}

// withExtension sets how often the lease is extended while the handler
// runs (default lease/3) and the longest total time one attempt may hold
// it (default 10×lease; see WithLease). The tests shorten them; no user
// needs to.
func withExtension(every, maxHeld time.Duration) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if every <= 0 || maxHeld <= 0 {
			return fmt.Errorf("%w: extension interval and max held time must be positive", ErrInvalidOption)
		}
		s.Put(optExtension, extension{every, maxHeld})
		return nil
	})
}

// WithStoreTimeout bounds each store call: Claim, Complete (each of its
// retries), Release, Extend and Get. The default is 5s, or a third of the
// lease when that is shorter, so that a store that stops answering
// (database/sql has no timeout of its own) fails the call instead of
// holding the message, and an Extend gives up before the lease it extends
// runs out. d must be positive and shorter than the lease
// (checked by Dedup). Taken by Dedup.
func WithStoreTimeout(d time.Duration) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, optStoreTimeout, "store timeout", d)
	})
}

// WithHistoryRedactor passes every error text through r before it is stored
// in the attempt history. A text on which r panics is stored as
// a placeholder ("[text withheld: the redactor panicked]"), never unredacted. Taken by Dedup.
func WithHistoryRedactor(r func(text string) string) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if r == nil {
			return fmt.Errorf("%w: nil redactor", ErrInvalidOption)
		}
		s.Put(optRedactor, r)
		return nil
	})
}

// Dedup claims the operation in store before the handler runs and completes
// it after the handler returned nil, so the router acks only after Complete.
// namespace separates this handler's records from every other handler's
// (use the handler name, plus the consumer group when several groups
// consume one topic).
//
// It reads the operation from the message context (put there by Identity);
// without one it extracts it with the default idempotency.Extractor and
// rejects messages without a key.
//
// Per claim result: Acquired runs the handler with the lease (Complete on
// success, Release on failure, so a failed message is never mistaken for a
// duplicate); Completed re-emits the stored produced messages and returns
// nil; InProgress returns *InProgressError (nack with a delay, not a
// failure); Conflict and Exhausted return a *dlq.FinalError. A store outage
// returns an error wrapping ErrStoreUnavailable. A handler panic is
// recovered and recorded (reason "panic", with the stack). A failure that
// is final (retry.Permanent, or a *dlq.FinalError the handler returns,
// whose reason is kept) leaves the record EXHAUSTED, so a duplicate is
// dead-lettered again without running; a shutdown (the message context
// canceled and the error its cancellation) releases the claim uncharged,
// even when marked final. A lease lost while the handler runs (an
// extension refused by fencing) cancels the handler's context with cause
// idempotency.ErrLeaseLost and returns a *LeaseLostError, as a Complete
// refused by fencing does.
//
// A message without a key (delivery.ProcessWithoutDedup) has no dedup record and
// is never skipped as a duplicate, but it has a bounded number of
// attempts: those that ran the handler are charged to an attempt record
// under its UUID in the reserved namespace "surely.keyless", except the first attempt of a
// delivery the broker numbers as the first (delivery.Info.Count 1), which
// costs no store call unless it fails (see delivery.ProcessWithoutDedup). A message
// without a UUID is bounded by the broker's count, else gets one attempt.
//
// A *dlq.FinalError the handler returns is never written: the attempts,
// history and operation the dead letter needs go into a copy, which
// dlq.AsFinal finds in the returned error (errors.Is still finds the
// handler's). A package-level final error is safe to return.
//
// It takes WithLease, WithMaxAttempts, WithStoreTimeout,
// WithHistoryRedactor and WithLogger.
func Dedup(store idempotency.Store, namespace string, opts ...Option) (message.HandlerMiddleware, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOption)
	}
	if err := idem.ValidateNamespace(namespace); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if namespace == idem.KeylessNamespace {
		return nil, fmt.Errorf("%w: namespace %q is reserved for the attempt records of keyless messages", ErrInvalidOption, namespace)
	}
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "middleware.Dedup", optLease, optMaxAttempts, optExtension,
		optStoreTimeout, optRedactor, options.Logger); err != nil {
		return nil, err
	}
	ext := options.Get(set, optExtension, extension{})
	c := dedupConfig{
		lease:        options.Get(set, optLease, defaults.Lease),
		maxAttempts:  options.Get(set, optMaxAttempts, defaults.MaxAttempts),
		extendEvery:  ext.every,
		maxHeld:      ext.maxHeld,
		storeTimeout: options.Get(set, optStoreTimeout, time.Duration(0)),
		redact:       options.Get[func(text string) string](set, optRedactor, nil),
		logger:       options.Get[*slog.Logger](set, options.Logger, nil),
	}
	if c.extendEvery == 0 {
		c.extendEvery, c.maxHeld = c.lease/3, 10*c.lease
	}
	if c.extendEvery >= c.lease {
		return nil, fmt.Errorf("%w: extension interval %v must be shorter than the lease %v", ErrInvalidOption, c.extendEvery, c.lease)
	}
	if c.storeTimeout == 0 {
		c.storeTimeout = min(defaults.StoreTimeout, c.lease/3)
	}
	if c.storeTimeout >= c.lease {
		return nil, fmt.Errorf("%w: store timeout %v must be shorter than the lease %v", ErrInvalidOption, c.storeTimeout, c.lease)
	}
	ex, err := idempotency.NewExtractor()
	if err != nil {
		return nil, err
	}
	d := &dedup{store: store, ns: namespace, cfg: c, ex: ex}
	if rr, ok := store.(idempotency.RetentionReporter); ok {
		d.retention = rr.Retention()
	}
	d.kl = &dedup{store: store, ns: idem.KeylessNamespace, cfg: c, ex: ex, retention: d.retention}
	return d.middleware, nil
}

type dedup struct {
	store     idempotency.Store
	ns        string
	kl        *dedup // keeps the attempt records of keyless messages, in idem.KeylessNamespace
	cfg       dedupConfig
	ex        *idempotency.Extractor
	extenders sync.Pool
	retention time.Duration // the store's, when it reports one
	// waits is set once a store call waited on its context's Done: every
	// later call gets a plain context.WithDeadline (see boundCall).
	waits atomic.Bool
}

// log is the logger of warnings: the one given, else slog.Default().
func (c *dedupConfig) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

func (d *dedup) middleware(h message.HandlerFunc) message.HandlerFunc {
	// The offer to h of claiming inside its own transaction: accepted by
	// the SQL inbox on its first call (see internal/opctx.InTxClaims).
	inTx := opctx.NewInTxClaims(d.store)
	return func(msg *message.Message) (_ []*message.Message, err error) {
		ctx := msg.Context()
		op, ok := opctx.From(ctx)
		if !ok {
			if text, bad := msg.Metadata[delivery.KeyDecodeError]; bad {
				return nil, dlq.Final(dlq.ReasonDecode, fmt.Errorf("%w: %s", ErrUndecodable, text))
			}
			// xerr, not err: the deferred annotate below must see the
			// named result, not a variable of this block.
			id, xerr := extract(d.ex, msg)
			if xerr != nil {
				if _, ok := dlq.AsFinal(xerr); ok {
					return nil, xerr
				}
				return nil, dlq.Final(dlq.ReasonNoKey, xerr)
			}
			if r := reportFrom(ctx); r != nil {
				op = &r.op // the outcome report reads it
			} else {
				op = new(opctx.Op)
			}
			*op = opctx.Op{Operation: idempotency.Operation{Key: id.Key, Fingerprint: id.Fingerprint}}
			// The handler's context derives from ctx: it must carry op.
			orig := ctx
			ctx = opctx.With(ctx, op)
			msg.SetContext(ctx)
			defer msg.SetContext(orig)
			defer func() { err = annotate(err, op) }()
		}
		if op.Key == "" { // delivery.ProcessWithoutDedup
			return d.keyless(ctx, h, msg, op)
		}
		op.InTx, op.Deferred = inTx, nil
		return d.handle(ctx, h, msg, op)
	}
}

// storeCtx is the context of a store call that must finish even when the
// message context is canceled (Complete, Release, Extend): a shutdown
// still commits or releases its claims. It is always bounded by the store
// timeout (WithStoreTimeout). Call stop when the call returned.
func (d *dedup) storeCtx(ctx context.Context) storeCall {
	return boundCall(context.WithoutCancel(ctx), d.cfg.storeTimeout, &d.waits)
}

// claimCtx is the context of a Claim: the message context itself (a
// shutdown may abandon a claim; its lease expires), bounded like storeCtx.
func (d *dedup) claimCtx(ctx context.Context) storeCall {
	return boundCall(ctx, d.cfg.storeTimeout, &d.waits)
}

func (d *dedup) handle(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op) ([]*message.Message, error) {
	if op.InTx != nil && op.InTx.Accepted() {
		return d.runDeferred(ctx, h, msg, op, d.request(ctx, msg, op, ""))
	}
	res, err := d.claim(ctx, msg, op, "")
	if err != nil {
		return nil, err
	}
	return d.claimed(ctx, h, msg, op, res)
}

// claimed acts on the result of a claim: runs the handler when Acquired.
func (d *dedup) claimed(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op, res idempotency.ClaimResult) ([]*message.Message, error) {
	switch res.Status {
	case idempotency.Acquired:
		return d.run(ctx, h, msg, op, res)
	case idempotency.Completed:
		setOutcome(ctx, delivery.OutcomeDuplicate)
		return replay(res.Outcome), nil
	case idempotency.InProgress:
		setOutcome(ctx, delivery.OutcomeInProgress)
		return nil, &InProgressError{Key: op.Key, Until: res.Until, Wait: res.Wait}
	case idempotency.Conflict:
		return nil, dlq.Final(dlq.ReasonConflict, fmt.Errorf("%w: key %q, stored fingerprint %s, message fingerprint %s",
			ErrConflict, op.Key, res.StoredFingerprint, op.Fingerprint))
	case idempotency.Exhausted:
		return nil, exhaustedError(op.Key, res)
	default:
		return nil, fmt.Errorf("%w: claim %q returned unknown status %v", ErrStoreUnavailable, op.Key, res.Status)
	}
}

// claim claims op's record. reopen, when set, is a fresh budget's ID
// (ClaimRequest.Reopen); else a replayed message's run ID reopens it.
func (d *dedup) claim(ctx context.Context, msg *message.Message, op *opctx.Op, reopen string) (idempotency.ClaimResult, error) {
	req := d.request(ctx, msg, op, reopen)
	sctx := d.claimCtx(ctx)
	res, err := d.store.Claim(sctx.ctx, req)
	sctx.stop()
	if err != nil {
		return res, fmt.Errorf("%w: claim %q: %w", ErrStoreUnavailable, op.Key, err)
	}
	return res, nil
}

// request is the claim of op (see claim), and sets op's namespace and
// retention.
func (d *dedup) request(ctx context.Context, msg *message.Message, op *opctx.Op, reopen string) idempotency.ClaimRequest {
	op.Namespace = d.ns
	op.Retention = d.retention
	req := idempotency.ClaimRequest{
		Namespace: d.ns, Key: op.Key, Fingerprint: op.Fingerprint,
		Lease: d.cfg.lease, MaxAttempts: d.cfg.maxAttempts,
		// This process, "host/pid": read once, then a string shared by
		// every claim.
		Owner: idem.ProcessOwner(),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		req.TraceID, req.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	// A replayed message reopens an EXHAUSTED record once per replay run.
	// A malformed run ID is ignored (no reopen), never stored.
	if id := msg.Metadata.Get(dlq.KeyReplayID); id != "" && reopen == "" {
		if err := idem.ValidateKey(id); err != nil {
			d.cfg.log().WarnContext(ctx, "surely: ignoring an invalid replay ID; the record is not reopened",
				"key", op.Key, "error", err)
		} else {
			req.Reopen = id
		}
	}
	if reopen != "" {
		req.Reopen = reopen
	}
	return req
}

func exhaustedError(key string, res idempotency.ClaimResult) *dlq.FinalError {
	reason := dlq.ReasonExhausted
	last := "none recorded"
	if n := len(res.History); n > 0 {
		h := res.History[n-1]
		switch h.Reason {
		case "", "error", "canceled": // not final verdicts
		default:
			// panic, permanent, or the reason of a *dlq.FinalError the
			// handler returned: the dead letter keeps it.
			reason = dlq.Reason(h.Reason)
		}
		last = string(h.Result)
		if h.Error != "" {
			last += ": " + h.Error
		}
	}
	fe := dlq.Final(reason, fmt.Errorf("%w: key %q after %d attempts; last attempt %s", ErrExhausted, key, res.Attempts, last))
	fe.Attempts, fe.History = res.Attempts, res.History
	if n := len(res.History); n > 0 {
		// The cause is known only as recorded: its type chain, not ours.
		fe.ErrorTypes = res.History[n-1].Type
	}
	return fe
}

// keyless runs a message without an operation key (delivery.ProcessWithoutDedup)
// within the attempt budget. It has no dedup record: nothing is ever
// skipped as a duplicate. Only attempts that ran the handler are charged,
// to an attempt record under the message UUID, in the store, in the
// reserved namespace "surely.keyless" with the key "<namespace>/<UUID>"
// (the UUID's SHA-256 when it is no valid key), so it never meets an
// operation key:
//
//   - the first attempt of a delivery the broker numbers as the first
//     (delivery.Info.Count 1) runs without a store call: a success costs
//     nothing durable. Its failure is charged to the record, which it
//     reopens with a fresh budget (an earlier message that reused the
//     UUID no longer counts).
//   - every other attempt (a redelivery, an in-process retry, a broker
//     without a count) claims the record before it runs, as an operation's
//     record is claimed: a crash is counted, a retry.After delay kept, a
//     shutdown not charged, and the budget ends in a dead letter
//     (exhausted, or panic). A breaker pause, which runs nothing, charges
//     nothing. A success closes the claim uncharged (never DONE), so a
//     later message with the same UUID runs.
//   - a message without a UUID has no record: the broker's count bounds
//     it when there is one, else it has one attempt (its failure is
//     dead-lettered, reason exhausted).
//
// The handler sees the operation with an empty key, and its attempt
// number and how the previous attempt ended, as for a keyed message.
func (d *dedup) keyless(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op) ([]*message.Message, error) {
	info, counted := delivery.InfoFrom(ctx)
	counted = counted && info.Count > 0
	if msg.UUID == "" {
		if counted {
			return d.keylessCounted(ctx, h, msg, op, info.Count, d.cfg.maxAttempts)
		}
		return d.keylessCounted(ctx, h, msg, op, 1, 1)
	}
	rec := &opctx.Op{Operation: idempotency.Operation{Key: keylessKey(d.ns, msg.UUID)}}
	r := reportFrom(ctx)
	if !counted || info.Count != 1 || r == nil || r.attempts > 1 {
		// Without the report, an in-process retry could not be told
		// from the first attempt: claim.
		return d.keylessRecord(ctx, h, msg, op, rec, "")
	}
	op.Attempt, op.Previous, op.PreviousError = 1, "", ""
	r.attempt = 1
	msgs, err := runHandler(h, msg)
	if err == nil {
		setOutcome(ctx, delivery.OutcomeProcessedWithoutDedup)
		return msgs, nil
	}
	if retry.Classify(ctx, err) == retry.ClassCanceled {
		return nil, err // a shutdown: not charged
	}
	// Charge the failure to the record, with a fresh budget: the message
	// is new by the broker's count. The record goes through the same
	// Claim and Release as an attempt that claimed before it ran.
	ran := func(*message.Message) ([]*message.Message, error) { return nil, err }
	return d.keylessRecord(ctx, ran, msg, op, rec, "keyless-"+watermill.NewUUID())
}

// keylessRecord runs h as an attempt charged to the keyless record rec.
// reopen, when set, gives the record a fresh budget, and h only reports
// the failure of an attempt that already ran: when the record cannot be
// claimed, that failure is returned as it is, not recorded.
func (d *dedup) keylessRecord(ctx context.Context, h message.HandlerFunc, msg *message.Message, op, rec *opctx.Op, reopen string) ([]*message.Message, error) {
	res, err := d.kl.claim(ctx, msg, rec, reopen)
	if err == nil && res.Status == idempotency.Acquired {
		// The handler reads the message's operation, not rec.
		seen := func(m *message.Message) ([]*message.Message, error) {
			op.Attempt, op.Previous, op.PreviousError = rec.Attempt, rec.Previous, rec.PreviousError
			return h(m)
		}
		return d.kl.run(ctx, seen, msg, rec, res)
	}
	if reopen != "" {
		return h(msg)
	}
	if err != nil {
		return nil, err
	}
	switch res.Status {
	case idempotency.InProgress:
		setOutcome(ctx, delivery.OutcomeInProgress)
		return nil, &InProgressError{Key: rec.Key, Until: res.Until, Wait: res.Wait}
	case idempotency.Exhausted:
		return nil, exhaustedError(rec.Key, res)
	case idempotency.Completed:
		// A record left DONE (no longer written for keyless messages)
		// must not skip this message, nor can it count its attempts:
		// one attempt.
		return d.keylessCounted(ctx, h, msg, op, 1, 1)
	default:
		return nil, fmt.Errorf("%w: claim %q returned unexpected status %v", ErrStoreUnavailable, rec.Key, res.Status)
	}
}

// keylessCounted runs attempt count (of budget) of a keyless message
// counted without a record.
func (d *dedup) keylessCounted(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op, count, budget int) ([]*message.Message, error) {
	if count > budget {
		fe := dlq.Final(dlq.ReasonExhausted, fmt.Errorf("%w: message %q without an operation key was delivered %d times; the budget is %d",
			ErrExhausted, msg.UUID, count, budget))
		fe.Attempts = count - 1
		return nil, fe
	}
	op.Attempt = count
	if r := reportFrom(ctx); r != nil {
		r.attempt = count
	}
	msgs, err := runHandler(h, msg)
	if err == nil {
		setOutcome(ctx, delivery.OutcomeProcessedWithoutDedup)
		return msgs, nil
	}
	if _, final := dlq.AsFinal(err); final || count < budget ||
		retry.Classify(ctx, err) != retry.ClassTransient {
		return nil, err
	}
	// The last attempt of the budget failed: dead-letter it now, with its
	// cause, rather than on a redelivery that knows nothing of it.
	reason := dlq.ReasonExhausted
	var pe *PanicError
	if errors.As(err, &pe) {
		reason = dlq.ReasonPanic
	}
	fe := dlq.Final(reason, err)
	fe.Attempts = count
	return nil, fe
}

// keylessKey is the key of the attempt record of a keyless message in
// "surely.keyless": the handler's namespace (which has no "/"), a "/" and
// the message UUID, or "sha256:" and its hex digest when the UUID is no
// valid key.
func keylessKey(ns, uuid string) string {
	key := ns + "/" + uuid
	if idem.ValidateKey(key) != nil {
		sum := sha256.Sum256([]byte(uuid))
		key = ns + "/sha256:" + hex.EncodeToString(sum[:])
	}
	return key
}

func (d *dedup) run(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op, res idempotency.ClaimResult) ([]*message.Message, error) {
	return d.runWith(ctx, h, msg, op, res, nil)
}

// runDeferred leaves the claim of req to the handler, which accepted to
// claim inside its own transaction (op.InTx): on a first delivery from a
// broker that counts deliveries, the claim, the effect and the DONE mark
// then commit together; otherwise the handler commits the claim first.
func (d *dedup) runDeferred(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op, req idempotency.ClaimRequest) ([]*message.Message, error) {
	dc := &opctx.DeferredClaim{Request: req, Durable: true}
	if info, ok := delivery.InfoFrom(ctx); ok && info.Count > 0 {
		dc.PriorDeliveries = info.Count - 1
		// A replay reopens a record: that goes through a committed claim.
		dc.Durable = info.Count > 1 || req.Reopen != ""
	}
	op.Deferred = dc
	return d.runWith(ctx, h, msg, op, idempotency.ClaimResult{}, dc)
}

// runWith runs the handler under the claim res, or, with dc, under the
// claim the handler makes (see runDeferred), and completes or releases
// the attempt.
func (d *dedup) runWith(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op, res idempotency.ClaimResult, dc *opctx.DeferredClaim) ([]*message.Message, error) {
	lease := res.Lease
	op.Attempt, op.Token, op.Previous, op.PreviousError, op.Committed = lease.Attempt, lease.Token, res.Previous, res.PreviousError, false
	if rep := reportFrom(ctx); rep != nil && dc == nil {
		rep.claimed(ctx, d.store, op)
	}
	r := d.attempt(ctx, h, msg, lease)
	if dc != nil {
		op.Deferred = nil
		var (
			out  []*message.Message
			done bool
			err  error
		)
		if r.lease, out, done, err = d.settle(ctx, h, msg, op, dc, r.err); done {
			return out, err
		}
	}
	return d.finish(ctx, op, r)
}

// ran is what one run of the handler left.
type ran struct {
	msgs []*message.Message
	err  error // the handler's
	// cause is the cause of the handler context's cancellation:
	// ErrHandlerHung, idempotency.ErrLeaseLost, or nil.
	cause error
	lease idempotency.Lease // as the last extension left it
}

// attempt runs the handler under lease, extending the lease meanwhile.
//
// The handler's context is canceled when it outlives the longest lease
// hold (10 leases by default): a hung attempt ends as a charged failure, so a
// message that hangs every time is dead-lettered. It is also canceled
// with the message context while the handler runs, but not when the
// handler returns: messages it produced with it stay publishable. It
// costs one allocation unless the handler waits on it (see attemptCtx).
func (d *dedup) attempt(ctx context.Context, h message.HandlerFunc, msg *message.Message, lease idempotency.Lease) ran {
	hctx := newAttemptCtx(ctx)
	msg.SetContext(hctx)
	ext := d.startExtender(ctx, lease, hctx)
	var r ran
	r.msgs, r.err = runHandler(h, msg)
	r.lease = ext.stop()
	hctx.stop()
	msg.SetContext(ctx)
	r.cause = hctx.cause()
	if r.err != nil && errors.Is(r.cause, ErrHandlerHung) {
		r.err = fmt.Errorf("%w: %w", ErrHandlerHung, r.err)
	}
	return r
}

// finish completes or releases the attempt r ran.
func (d *dedup) finish(ctx context.Context, op *opctx.Op, r ran) ([]*message.Message, error) {
	switch {
	case r.err == nil && d.kl == nil: // d keeps keyless attempt records: a success closes one uncharged
		d.closeKeyless(ctx, r.lease)
		setOutcome(ctx, delivery.OutcomeProcessedWithoutDedup)
		return r.msgs, nil
	case r.err == nil && op.Committed:
		setOutcome(ctx, delivery.OutcomeProcessed)
		return r.msgs, nil
	case errors.Is(r.cause, idempotency.ErrLeaseLost):
		return nil, lostWhileRunning(ctx, op, r.err)
	case r.err == nil:
		return d.succeeded(ctx, op, r.lease, r.msgs)
	default:
		return nil, d.failed(ctx, op, r.lease, r.err)
	}
}

// lostWhileRunning is the error of an attempt whose lease an extension
// found taken over: the handler was canceled, and the new owner decides
// the record. Neither Complete nor Release (both would be refused), no
// dead letter, whatever the handler returned: nack. Its error is kept as
// text so that no classification of it (permanent, canceled) applies.
func lostWhileRunning(ctx context.Context, op *opctx.Op, herr error) error {
	setOutcome(ctx, delivery.OutcomeLeaseLost)
	lost := fmt.Errorf("extend: %w", idempotency.ErrLeaseLost)
	if herr != nil {
		lost = fmt.Errorf("%w; the canceled handler returned %q", lost, herr.Error())
	}
	return &LeaseLostError{Key: op.Key, Err: lost}
}

// succeeded completes the attempt with the messages it produced.
func (d *dedup) succeeded(ctx context.Context, op *opctx.Op, lease idempotency.Lease, msgs []*message.Message) ([]*message.Message, error) {
	outcome := idempotency.Outcome{Messages: store(msgs)}
	if err := d.complete(ctx, lease, outcome); err != nil {
		if errors.Is(err, idempotency.ErrLeaseLost) {
			setOutcome(ctx, delivery.OutcomeLeaseLost)
			return nil, &LeaseLostError{Key: op.Key, Err: err}
		}
		return nil, fmt.Errorf("%w: complete %q: %w", ErrStoreUnavailable, op.Key, err)
	}
	setOutcome(ctx, delivery.OutcomeProcessed)
	return msgs, nil
}

// failed releases the attempt that failed with herr and returns the
// delivery's error.
func (d *dedup) failed(ctx context.Context, op *opctx.Op, lease idempotency.Lease, herr error) error {
	f := d.failure(ctx, herr)
	sctx := d.storeCtx(ctx)
	rerr := d.store.Release(sctx.ctx, lease, f)
	sctx.stop()
	if rerr != nil && !errors.Is(rerr, idempotency.ErrLeaseLost) {
		rerr = fmt.Errorf("%w: release %q: %w", ErrStoreUnavailable, op.Key, rerr)
	}
	switch {
	case f.Canceled:
		setOutcome(ctx, delivery.OutcomeCanceled)
		return errors.Join(herr, rerr)
	case errors.Is(rerr, idempotency.ErrLeaseLost):
		// Another owner took the operation over and decides its record:
		// this stale attempt's verdict, even a permanent error, neither
		// dead-letters nor acks the message. Nack; the redelivery's claim
		// finds the new owner's state (in progress, done or exhausted).
		setOutcome(ctx, delivery.OutcomeLeaseLost)
		return &LeaseLostError{Key: op.Key, Err: fmt.Errorf("release after %q: %w", herr.Error(), rerr)}
	case f.Final && rerr == nil:
		return d.final(ctx, op, lease, herr)
	case f.Final:
		// The store did not record the final verdict, so the record
		// is still claimable: nack, and let the redelivery record it.
		// The verdict is kept as text only, so that no step
		// dead-letters (and acks) the message meanwhile.
		return fmt.Errorf("final failure not recorded (%s): %w", herr.Error(), rerr)
	case rerr != nil:
		return errors.Join(herr, rerr)
	}
	return herr
}

// final is the dead letter's error of an attempt whose final failure herr
// the store recorded: a *dlq.FinalError with the attempts and history.
// The handler's own FinalError is never written (see finalCopy).
func (d *dedup) final(ctx context.Context, op *opctx.Op, lease idempotency.Lease, herr error) error {
	fe, ok := dlq.AsFinal(herr)
	if !ok {
		fe = dlq.Final(dlq.ReasonPermanent, herr)
	}
	var history []idempotency.AttemptRecord
	if fe.History == nil {
		gctx := d.storeCtx(ctx)
		if got, err := d.store.Get(gctx.ctx, d.ns, op.Key); err == nil {
			history = got.History
		}
		gctx.stop()
	}
	set := func(cp *dlq.FinalError) {
		if cp.Attempts == 0 {
			cp.Attempts = lease.Attempt
		}
		if cp.History == nil {
			cp.History = history
		}
	}
	if !ok {
		set(fe)
		return fe
	}
	return editFinal(herr, fe, set)
}

// closeKeyless ends the claim of a keyless record whose attempt
// succeeded: released uncharged (as canceled, reason "succeeded"), never
// DONE, so that no later message with the same UUID is skipped. The
// message is acked either way: a failure here is only logged, and leaves
// the claim to expire.
func (d *dedup) closeKeyless(ctx context.Context, lease idempotency.Lease) {
	sctx := d.storeCtx(ctx)
	err := d.store.Release(sctx.ctx, lease, idempotency.Failure{Canceled: true, Reason: "succeeded", Error: "succeeded"})
	sctx.stop()
	if err != nil {
		d.cfg.log().WarnContext(ctx, "surely: closing the attempt record of a keyless message failed; it stays claimed until its lease expires",
			"key", lease.Key, "error", err)
	}
}

// settle resolves the claim the handler was left (dc) after it returned
// herr: done is true when that ends the delivery (out, err), else the
// attempt ran under lease and is completed or released as usual.
func (d *dedup) settle(ctx context.Context, h message.HandlerFunc, msg *message.Message, op *opctx.Op, dc *opctx.DeferredClaim, herr error) (lease idempotency.Lease, out []*message.Message, done bool, err error) {
	late := !dc.Made
	if late {
		// The handler returned before it claimed (code around the inbox
		// that failed first, a store error at the claim), or without
		// claiming at all. Claim now, so that the attempt is counted like
		// any other: its failure released, its success completed.
		if herr == nil {
			d.cfg.log().ErrorContext(ctx, "surely: handler returned without claiming the operation in its transaction; recording it after the fact",
				"key", op.Key)
		}
		sctx := d.storeCtx(ctx)
		res, cerr := d.store.Claim(sctx.ctx, dc.Request)
		sctx.stop()
		if cerr != nil {
			cerr = fmt.Errorf("%w: claim %q: %w", ErrStoreUnavailable, op.Key, cerr)
			if herr != nil {
				cerr = errors.Join(herr, cerr)
			}
			return lease, nil, true, cerr
		}
		dc.Made, dc.Result = true, res
	}
	res := dc.Result
	if res.Status != idempotency.Acquired {
		if herr != nil && !late {
			// The attempt failed and rolled its claim back; meanwhile the
			// record became another owner's (or done): it decides.
			setOutcome(ctx, delivery.OutcomeLeaseLost)
			return lease, nil, true, &LeaseLostError{Key: op.Key, Err: fmt.Errorf("attempt failed (%s); the record is no longer claimable (status %v): %w",
				herr.Error(), res.Status, idempotency.ErrLeaseLost)}
		}
		out, err = d.claimed(ctx, h, msg, op, res)
		return lease, out, true, err
	}
	lease = res.Lease
	op.Attempt, op.Token, op.Previous, op.PreviousError = lease.Attempt, lease.Token, res.Previous, res.PreviousError
	if r := reportFrom(ctx); r != nil {
		r.claimed(ctx, d.store, op)
	}
	return lease, nil, false, nil
}

// complete commits the DONE mark, retrying a failing store a few times
// inside the lease: a lost Complete means the effect runs again later.
func (d *dedup) complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	wait := 50 * time.Millisecond
	for i := 0; ; i++ {
		sctx := d.storeCtx(ctx)
		err := d.store.Complete(sctx.ctx, lease, outcome)
		sctx.stop()
		if err == nil || errors.Is(err, idempotency.ErrLeaseLost) || i == 3 {
			return err
		}
		d.cfg.log().WarnContext(ctx, "surely: complete failed, retrying", "key", lease.Key, "error", err)
		time.Sleep(wait)
		wait *= 2
	}
}

func (d *dedup) failure(ctx context.Context, err error) idempotency.Failure {
	redact := func(s string) string { return s }
	if r := d.cfg.redact; r != nil {
		redact = func(s string) string { return safeRedact(r, s) }
	}
	f := idempotency.Failure{
		Error:     redact(err.Error()),
		ErrorType: envelope.ErrorTypes(err),
		Reason:    "error",
	}
	// The store keeps the record from a claim until the delay has passed.
	f.RetryAfter, _ = retry.AfterDelay(err)
	var pe *PanicError
	switch {
	case errors.As(err, &pe):
		f.Reason = string(dlq.ReasonPanic)
		f.Stack = redact(pe.Stack)
	case retry.Classify(ctx, err) == retry.ClassCanceled:
		f.Canceled, f.Reason = true, "canceled"
	default:
		// Every final verdict leaves the record final (EXHAUSTED), so a
		// duplicate delivery is dead-lettered again without running: a
		// *dlq.FinalError the handler returned keeps its reason.
		if fe, ok := dlq.AsFinal(err); ok {
			f.Final, f.Reason = true, string(fe.Reason)
		} else if retry.IsPermanent(err) {
			f.Final, f.Reason = true, string(dlq.ReasonPermanent)
		}
	}
	return f
}

// runHandler runs h, turning a panic into a *PanicError.
func runHandler(h message.HandlerFunc, msg *message.Message) (msgs []*message.Message, err error) {
	defer func() {
		if pe := recovered(recover(), ""); pe != nil {
			msgs, err = nil, pe
		}
	}()
	return h(msg)
}

// extract runs the key sources of ex, turning a panic of one into a final
// failure with reason panic: a message without an identity has no budget
// to retry against.
func extract(ex *idempotency.Extractor, msg *message.Message) (id idempotency.Operation, err error) {
	defer func() {
		if pe := recovered(recover(), "key source"); pe != nil {
			id, err = idempotency.Operation{}, dlq.Final(dlq.ReasonPanic, pe)
		}
	}()
	return ex.Extract(msg)
}

// safeRedact applies redact to s; a redactor that panics yields
// a placeholder ("[text withheld: the redactor panicked]"), never the unredacted s.
func safeRedact(redact func(text string) string, s string) (out string) {
	defer func() {
		if recover() != nil {
			out = envelope.RedactorPanicked
		}
	}()
	return redact(s)
}

func store(msgs []*message.Message) []idempotency.StoredMessage {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]idempotency.StoredMessage, len(msgs))
	for i, m := range msgs {
		out[i] = idempotency.StoredMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	return out
}

// replay rebuilds the messages a completed operation produced, with their
// original UUIDs, so downstream consumers dedup them.
func replay(o *idempotency.Outcome) []*message.Message {
	if o == nil || len(o.Messages) == 0 {
		return nil
	}
	out := make([]*message.Message, len(o.Messages))
	for i, m := range o.Messages {
		msg := message.NewMessage(m.UUID, m.Payload)
		for k, v := range m.Metadata {
			msg.Metadata[k] = v
		}
		out[i] = msg
	}
	return out
}

// extender keeps a lease alive while the handler runs, bounded by maxHeld.
// Extenders and their timers are pooled: arming one costs no allocation.
//
// mu is never held across a store or broker call: stop (and so Complete)
// never waits for an Extend in flight. A tick's answer counts only for the
// run it started in (gen), since a stopped extender may be reused.
type extender struct {
	d       *dedup
	mu      sync.Mutex
	ctx     context.Context
	lease   idempotency.Lease
	start   time.Time
	timer   *time.Timer
	stopped bool
	gen     uint64      // incremented by stop
	hctx    *attemptCtx // the handler's context, canceled when it hangs or loses its lease
}

func (d *dedup) startExtender(ctx context.Context, lease idempotency.Lease, hctx *attemptCtx) *extender {
	e, _ := d.extenders.Get().(*extender)
	if e == nil {
		e = &extender{d: d, stopped: true}
		e.mu.Lock()
		e.timer = time.AfterFunc(time.Hour, e.tick)
		e.timer.Stop()
		e.mu.Unlock()
	}
	e.arm(ctx, lease, hctx)
	return e
}

// arm starts a run of a stopped extender.
func (e *extender) arm(ctx context.Context, lease idempotency.Lease, hctx *attemptCtx) {
	e.mu.Lock()
	e.ctx, e.lease, e.start, e.stopped, e.hctx = ctx, lease, time.Now(), false, hctx
	e.timer.Reset(e.d.cfg.extendEvery)
	e.mu.Unlock()
}

// tick extends the lease. A tick that fires late, after the extender was
// stopped and reused, extends the current owner's lease early: harmless.
// An extension refused by fencing (ErrLeaseLost) cancels the handler's
// context with cause idempotency.ErrLeaseLost at once: another owner has
// the operation, and every moment the stale handler runs on widens the
// window in which both have an effect.
func (e *extender) tick() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	if time.Since(e.start)+e.d.cfg.lease > e.d.cfg.maxHeld {
		e.d.cfg.log().WarnContext(e.ctx, "surely: handler exceeded the longest lease hold; canceling it and letting the lease expire",
			"key", e.lease.Key, "attempt", e.lease.Attempt, "max_held", e.d.cfg.maxHeld)
		e.hctx.hang(ErrHandlerHung)
		e.mu.Unlock()
		return
	}
	ctx, lease, gen := e.ctx, e.lease, e.gen
	e.mu.Unlock()

	sctx := e.d.storeCtx(ctx)
	if lease.Token == "" {
		// A claim inside the handler's transaction: the row lock it holds
		// is the lease. Only the broker's is extended.
		if c, ok := delivery.ControlFrom(ctx); ok {
			if berr := c.Extend(sctx.ctx); berr != nil {
				e.d.cfg.log().WarnContext(ctx, "surely: broker lease extension failed", "key", lease.Key, "error", berr)
			}
		}
		sctx.stop()
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.stopped && e.gen == gen {
			e.timer.Reset(e.d.cfg.extendEvery)
		}
		return
	}
	l, err := e.d.store.Extend(sctx.ctx, lease, e.d.cfg.lease)
	if c, ok := delivery.ControlFrom(ctx); ok && err == nil {
		// Keep the broker's lease in step with the store's.
		if berr := c.Extend(sctx.ctx); berr != nil {
			e.d.cfg.log().WarnContext(ctx, "surely: broker lease extension failed", "key", lease.Key, "error", berr)
		}
	}
	sctx.stop()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || e.gen != gen {
		return // the attempt ended meanwhile: its outcome no longer depends on this lease
	}
	switch {
	case err == nil:
		e.lease = l
	case errors.Is(err, idempotency.ErrLeaseLost):
		e.d.cfg.log().WarnContext(ctx, "surely: lease lost while the handler runs; canceling it", "key", lease.Key, "attempt", lease.Attempt)
		e.hctx.hang(idempotency.ErrLeaseLost)
		return
	default:
		e.d.cfg.log().WarnContext(ctx, "surely: lease extension failed", "key", lease.Key, "error", err)
	}
	e.timer.Reset(e.d.cfg.extendEvery)
}

// stop ends the extension, returns the current lease and recycles e. It
// does not wait for an extension in flight.
func (e *extender) stop() idempotency.Lease {
	e.timer.Stop()
	e.mu.Lock()
	e.stopped = true
	e.gen++
	lease := e.lease
	e.ctx, e.lease, e.hctx = nil, idempotency.Lease{}, nil
	e.mu.Unlock()
	e.d.extenders.Put(e)
	return lease
}
