package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// The dedup step's side of the lease protocol, on its own: what each claim
// status turns into, how a lost lease (fencing) surfaces on complete and
// release, how a failure is charged, the bounded retry of complete, and
// the lease extension while the handler runs. Time is a synctest bubble.

const leaseNS = "lease-tests"

func leaseMsg(uuid, key, payload string) *message.Message {
	m := message.NewMessage(uuid, []byte(payload))
	m.Metadata.Set(idempotency.DefaultMetadataKey, key)
	return m
}

func leaseDedup(t *testing.T, store idempotency.Store, fn message.HandlerFunc, opts ...middleware.Option) message.HandlerFunc {
	t.Helper()
	mw, err := middleware.Dedup(store, leaseNS, opts...)
	require.NoError(t, err)
	return mw(fn)
}

func leaseStore(t *testing.T) idempotency.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	return s
}

func TestDedupClaimStatuses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := leaseStore(t)
		runs := 0
		var h message.HandlerFunc
		var inner error
		h = leaseDedup(t, store, func(msg *message.Message) ([]*message.Message, error) {
			runs++
			// A second copy delivered while this attempt holds the lease.
			_, inner = h(leaseMsg("copy", "k-1", `{"n":1}`))
			out := message.NewMessage("out-1", []byte("produced"))
			out.Metadata.Set("m", "v")
			return []*message.Message{out}, nil
		}, middleware.WithLease(time.Minute))

		start := time.Now()
		msgs, err := h(leaseMsg("u-1", "k-1", `{"n":1}`))
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		var ip *middleware.InProgressError
		require.ErrorAs(t, inner, &ip, "a copy during the attempt is in progress elsewhere")
		assert.Equal(t, "k-1", ip.Key)
		assert.Equal(t, start.Add(time.Minute), ip.Until)

		// Completed: the handler does not run again; the outcome comes back.
		msgs, err = h(leaseMsg("u-2", "k-1", `{"n":1}`))
		require.NoError(t, err)
		assert.Equal(t, 1, runs)
		require.Len(t, msgs, 1)
		assert.Equal(t, "out-1", msgs[0].UUID)
		assert.Equal(t, []byte("produced"), []byte(msgs[0].Payload))
		assert.Equal(t, "v", msgs[0].Metadata.Get("m"))

		// The same key with another payload: a final conflict.
		_, err = h(leaseMsg("u-3", "k-1", `{"n":2}`))
		fe, final := dlq.AsFinal(err)
		require.True(t, final)
		assert.Equal(t, dlq.ReasonConflict, fe.Reason)
		assert.ErrorIs(t, err, middleware.ErrConflict)
		assert.Equal(t, 1, runs)
	})
}

func TestDedupStoreDownIsUnavailable(t *testing.T) {
	t.Parallel()
	store := faults.NewStore(leaseStore(t))
	store.SetDown(true)
	runs := 0
	h := leaseDedup(t, store, func(*message.Message) ([]*message.Message, error) { runs++; return nil, nil })
	_, err := h(leaseMsg("u-1", "k-1", "{}"))
	require.ErrorIs(t, err, middleware.ErrStoreUnavailable)
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Zero(t, runs)
	_, final := dlq.AsFinal(err)
	require.False(t, final, "an outage is not a reason to dead-letter")
}

// skewedClock is a store clock that can jump ahead of the process's time,
// as if the process had paused: the lease runs out without the extender
// getting a chance to run.
type skewedClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *skewedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}

func (c *skewedClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew += d
}

// leaseTakeOver lets the attempt's lease run out on the store's clock and
// claims the key as another consumer would.
func leaseTakeOver(t *testing.T, store idempotency.Store, clock *skewedClock, key string) idempotency.Lease {
	t.Helper()
	clock.jump(2 * time.Second) // past the 1s lease
	res, err := store.Claim(context.Background(), idempotency.ClaimRequest{
		Namespace: leaseNS, Key: key, Fingerprint: leaseFingerprint(t, `{}`), Lease: time.Minute, MaxAttempts: 5,
	})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	return res.Lease
}

// leaseFingerprint is the fingerprint the default extractor gives payload.
func leaseFingerprint(t *testing.T, payload string) string {
	t.Helper()
	ex, err := idempotency.NewExtractor()
	require.NoError(t, err)
	id, err := ex.Extract(leaseMsg("x", "x", payload))
	require.NoError(t, err)
	return id.Fingerprint
}

// Fencing: an attempt whose lease was taken over cannot complete or
// release; it reports the lost lease and the new owner's record stands.
func TestDedupFencedAttemptReportsLeaseLost(t *testing.T) {
	t.Parallel()
	for _, handlerErr := range []error{nil, errors.New("failed late")} {
		synctest.Test(t, func(t *testing.T) {
			clock := &skewedClock{}
			store, err := memstore.New(idempotency.WithClock(clock.now))
			require.NoError(t, err)
			var owner idempotency.Lease
			h := leaseDedup(t, store, func(*message.Message) ([]*message.Message, error) {
				owner = leaseTakeOver(t, store, clock, "k-1")
				return nil, handlerErr
			}, middleware.WithLease(time.Second))
			_, err = h(leaseMsg("u-1", "k-1", `{}`))
			var ll *middleware.LeaseLostError
			require.ErrorAs(t, err, &ll, "handler error %v", handlerErr)
			assert.Equal(t, "k-1", ll.Key)
			assert.ErrorIs(t, err, idempotency.ErrLeaseLost)
			assert.NotErrorIs(t, err, middleware.ErrStoreUnavailable)
			if handlerErr != nil {
				assert.Contains(t, err.Error(), "failed late")
			}
			rec, gerr := store.Get(context.Background(), leaseNS, "k-1")
			require.NoError(t, gerr)
			assert.Equal(t, idempotency.StateInProgress, rec.State)
			assert.Equal(t, owner.Token, rec.Token, "the new owner keeps the record")
		})
	}
}

// A permanent failure is charged, final, and carries the attempt number
// and the ledger; the next delivery finds the record exhausted for the
// same reason.
func TestDedupPermanentFailureIsFinal(t *testing.T) {
	t.Parallel()
	store := leaseStore(t)
	cause := retry.Permanent(errors.New("invalid order"))
	h := leaseDedup(t, store, func(*message.Message) ([]*message.Message, error) { return nil, cause })
	_, err := h(leaseMsg("u-1", "k-1", `{}`))
	fe, final := dlq.AsFinal(err)
	require.True(t, final)
	assert.Equal(t, dlq.ReasonPermanent, fe.Reason)
	assert.Equal(t, 1, fe.Attempts)
	require.Len(t, fe.History, 1)
	assert.Equal(t, idempotency.ResultFailed, fe.History[0].Result)
	assert.Equal(t, "permanent", fe.History[0].Reason)
	assert.ErrorIs(t, err, cause)

	_, err = h(leaseMsg("u-2", "k-1", `{}`))
	fe, final = dlq.AsFinal(err)
	require.True(t, final)
	assert.Equal(t, dlq.ReasonPermanent, fe.Reason, "exhausted by a permanent failure")
	assert.ErrorIs(t, err, middleware.ErrExhausted)
	assert.Equal(t, 1, fe.Attempts)
}

// The reason of an exhausted record comes from its last attempt: a panic,
// or a plain failure; the error types are the recorded ones.
func TestDedupExhaustedReasonFromLastAttempt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		fn     message.HandlerFunc
		reason dlq.Reason
		types  string
	}{
		{"panic", func(*message.Message) ([]*message.Message, error) { panic("boom") }, dlq.ReasonPanic, "*middleware.PanicError"},
		{"error", func(*message.Message) ([]*message.Message, error) { return nil, errors.New("boom") }, dlq.ReasonExhausted, "*errors.errorString"},
	}
	for _, c := range cases {
		store := leaseStore(t)
		h := leaseDedup(t, store, c.fn, middleware.WithMaxAttempts(1))
		_, err := h(leaseMsg("u-1", "k-1", `{}`))
		require.Error(t, err, c.name)
		_, final := dlq.AsFinal(err)
		require.False(t, final, "%s: the first failure is not final", c.name)

		_, err = h(leaseMsg("u-2", "k-1", `{}`))
		fe, final := dlq.AsFinal(err)
		require.True(t, final, c.name)
		assert.Equal(t, c.reason, fe.Reason, c.name)
		assert.Equal(t, 1, fe.Attempts, c.name)
		assert.Equal(t, c.types, fe.ErrorTypes, c.name)
		assert.Contains(t, err.Error(), "last attempt failed: ", c.name)
	}
}

// A canceled attempt is released as canceled: not charged, not final.
func TestDedupCanceledAttemptNotCharged(t *testing.T) {
	t.Parallel()
	store := leaseStore(t)
	shutdown := map[string]context.CancelFunc{}
	h := leaseDedup(t, store, func(msg *message.Message) ([]*message.Message, error) {
		shutdown[msg.UUID]() // the consumer shuts down during the attempt
		return nil, fmt.Errorf("call: %w", context.Canceled)
	}, middleware.WithMaxAttempts(1))
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		msg := leaseMsg(fmt.Sprint("u-", i), "k-1", `{}`)
		shutdown[msg.UUID] = cancel
		msg.SetContext(ctx)
		_, err := h(msg)
		cancel()
		require.ErrorIs(t, err, context.Canceled)
		_, final := dlq.AsFinal(err)
		require.False(t, final)
	}
	rec, err := store.Get(context.Background(), leaseNS, "k-1")
	require.NoError(t, err)
	assert.Equal(t, 3, rec.Attempts)
	assert.Equal(t, 3, rec.Canceled)
	assert.Equal(t, idempotency.StateFailed, rec.State, "a budget of one, never spent")
	assert.Equal(t, idempotency.ResultCanceled, rec.History[2].Result)
}

// flakyComplete fails the first n Complete calls with a transient error.
type flakyComplete struct {
	idempotency.Store
	mu    sync.Mutex
	n     int
	calls int
}

var errBlip = errors.New("store blip")

func (s *flakyComplete) Complete(ctx context.Context, l idempotency.Lease, o idempotency.Outcome) error {
	s.mu.Lock()
	s.calls++
	fail := s.calls <= s.n
	s.mu.Unlock()
	if fail {
		return errBlip
	}
	return s.Store.Complete(ctx, l, o)
}

// Complete is tried four times in all, 50ms, 100ms and 200ms apart.
func TestDedupCompleteRetriedFourTimes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ok := func(*message.Message) ([]*message.Message, error) { return nil, nil }

		store := &flakyComplete{Store: leaseStore(t), n: 3}
		start := time.Now()
		_, err := leaseDedup(t, store, ok)(leaseMsg("u-1", "k-1", `{}`))
		require.NoError(t, err, "the fourth try succeeds")
		assert.Equal(t, 4, store.calls)
		assert.Equal(t, 350*time.Millisecond, time.Since(start))

		store = &flakyComplete{Store: leaseStore(t), n: 4}
		_, err = leaseDedup(t, store, ok)(leaseMsg("u-1", "k-1", `{}`))
		require.ErrorIs(t, err, middleware.ErrStoreUnavailable)
		require.ErrorIs(t, err, errBlip)
		assert.Equal(t, 4, store.calls, "no fifth try")
	})
}

// While the handler runs, the lease is extended every interval by the
// lease length; past the longest hold the handler's context is canceled.
func TestDedupExtendsLeaseWhileRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := leaseStore(t)
		var logs bytes.Buffer
		var untils []time.Time
		start := time.Now()
		h := leaseDedup(t, store, func(*message.Message) ([]*message.Message, error) {
			for range 3 {
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				rec, err := store.Get(context.Background(), leaseNS, "k-1")
				require.NoError(t, err)
				untils = append(untils, rec.LeaseUntil)
			}
			return nil, nil
		}, middleware.WithLease(time.Second), middleware.WithExtension(100*time.Millisecond, time.Hour),
			middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		_, err := h(leaseMsg("u-1", "k-1", `{}`))
		require.NoError(t, err)
		assert.Empty(t, logs.String(), "no extension failed")
		assert.Equal(t, []time.Time{
			start.Add(1100 * time.Millisecond), start.Add(1200 * time.Millisecond), start.Add(1300 * time.Millisecond),
		}, untils)
	})
}

func TestDedupHungHandlerCanceled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := leaseStore(t)
		start := time.Now()
		h := leaseDedup(t, store, func(msg *message.Message) ([]*message.Message, error) {
			<-msg.Context().Done()
			return nil, msg.Context().Err()
		}, middleware.WithLease(time.Second), middleware.WithExtension(100*time.Millisecond, 1500*time.Millisecond))
		_, err := h(leaseMsg("u-1", "k-1", `{}`))
		require.ErrorIs(t, err, middleware.ErrHandlerHung)
		// The tick at 600ms would hold the lease until 1.6s > 1.5s.
		assert.Equal(t, 600*time.Millisecond, time.Since(start))
	})
}

// The extension interval must be shorter than the lease.
func TestDedupExtensionShorterThanLease(t *testing.T) {
	t.Parallel()
	store := leaseStore(t)
	_, err := middleware.Dedup(store, leaseNS, middleware.WithLease(time.Second), middleware.WithExtension(time.Second, time.Minute))
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
	_, err = middleware.Dedup(store, leaseNS, middleware.WithLease(time.Second), middleware.WithExtension(time.Second-1, time.Minute))
	require.NoError(t, err)
}

// A failed attempt returns the handler's error as it is; when the release
// also fails, both errors, the store's marked unavailable.
func TestDedupReleaseErrors(t *testing.T) {
	t.Parallel()
	failing := errors.New("downstream down")
	store := faults.NewStore(leaseStore(t))
	h := leaseDedup(t, store, func(*message.Message) ([]*message.Message, error) { return nil, failing })
	_, err := h(leaseMsg("u-1", "k-1", `{}`))
	require.Same(t, failing, err)

	h = leaseDedup(t, store, func(*message.Message) ([]*message.Message, error) {
		store.SetDown(true) // the store goes away during the attempt
		return nil, failing
	})
	_, err = h(leaseMsg("u-2", "k-2", `{}`))
	store.SetDown(false)
	require.ErrorIs(t, err, failing)
	require.ErrorIs(t, err, middleware.ErrStoreUnavailable)
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Equal(t, 2, store.Calls("Release"))
}

// By default a handler may hold its lease for ten leases: one running for
// three leases is extended, not canceled.
func TestDedupDefaultLongestHold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := leaseStore(t)
		h := leaseDedup(t, store, func(msg *message.Message) ([]*message.Message, error) {
			select {
			case <-time.After(3 * time.Second):
				return nil, nil
			case <-msg.Context().Done():
				return nil, msg.Context().Err()
			}
		}, middleware.WithLease(time.Second))
		_, err := h(leaseMsg("u-1", "k-1", `{}`))
		require.NoError(t, err)
	})
}

// exhaustedNoHistory reports every key exhausted, with no attempt ledger.
type exhaustedNoHistory struct{ idempotency.Store }

func (exhaustedNoHistory) Claim(context.Context, idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	return idempotency.ClaimResult{Status: idempotency.Exhausted, Attempts: 3}, nil
}

// A store may report an exhausted record without its ledger: the message is
// still dead-lettered as exhausted.
func TestDedupExhaustedWithoutHistory(t *testing.T) {
	t.Parallel()
	h := leaseDedup(t, exhaustedNoHistory{leaseStore(t)}, func(*message.Message) ([]*message.Message, error) {
		t.Error("the handler ran for an exhausted key")
		return nil, nil
	})
	_, err := h(leaseMsg("u-1", "k-1", `{}`))
	fe, final := dlq.AsFinal(err)
	require.True(t, final)
	assert.Equal(t, dlq.ReasonExhausted, fe.Reason)
	assert.Equal(t, 3, fe.Attempts)
	assert.Contains(t, err.Error(), "last attempt none recorded")
}
