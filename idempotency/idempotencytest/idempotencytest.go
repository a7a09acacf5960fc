package idempotencytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// Harness is what a store under test provides.
type Harness struct {
	Store idempotency.Store
	// Advance moves the store's clock forward by at least d. A store with an
	// injectable clock moves a fake clock; a store on a real server (Redis
	// TIME) sleeps d.
	Advance func(t *testing.T, d time.Duration)
	// Lease is the lease the suite uses in claims whose expiry it tests:
	// short for real-clock stores (e.g. 150ms), anything for fake clocks.
	Lease time.Duration
	// Retention is the retention the store was built with (DONE/FAILED/
	// EXHAUSTED records are forgotten after it). Keep it short for real-clock
	// stores (e.g. 400ms).
	Retention time.Duration
}

// Run runs every conformance test as a parallel subtest; newHarness is
// called once per subtest. The tests of an optional interface of package
// idempotency (idempotency.Lister, idempotency.RecordsReader) run when
// the store implements it and are skipped otherwise.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	require.NotNil(t, newHarness, "newHarness")
	for _, tc := range slices.Concat(tests, capabilityTests) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, setup(t, newHarness))
		})
	}
}

// longLease is the lease of claims whose expiry a test does not look at: it
// outlives every test, whatever the store's speed.
const longLease = time.Minute

// timeTolerance absorbs stores that keep times at millisecond precision.
const timeTolerance = time.Millisecond

// The two payload fingerprints the tests use.
const (
	fpA = "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3"
	fpB = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
)

// env is one subtest's view of the store under test.
type env struct {
	t   *testing.T
	h   Harness
	ctx context.Context
	ns  string
	// newHarness builds another Harness, for subtests that need their
	// own clock.
	newHarness func(t *testing.T) Harness
}

func setup(t *testing.T, newHarness func(t *testing.T) Harness) *env {
	t.Helper()
	h := newHarness(t)
	require.NotNil(t, h.Store, "Harness.Store")
	require.NotNil(t, h.Advance, "Harness.Advance")
	require.Greater(t, h.Lease, time.Duration(0), "Harness.Lease")
	require.Greater(t, h.Retention, time.Duration(0), "Harness.Retention")
	return &env{t: t, h: h, ctx: t.Context(), ns: randomNamespace(), newHarness: newHarness}
}

// randomNamespace returns a namespace no other subtest or run uses.
func randomNamespace() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "ct-" + hex.EncodeToString(b[:])
}

// req is a valid claim for key in the subtest's namespace, with fingerprint
// fpA, a long lease and a budget of 10.
func (e *env) req(key string) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{
		Namespace:   e.ns,
		Key:         key,
		Fingerprint: fpA,
		Lease:       longLease,
		MaxAttempts: 10,
	}
}

// short is req with the harness's (expiring) lease.
func (e *env) short(key string) idempotency.ClaimRequest {
	r := e.req(key)
	r.Lease = e.h.Lease
	return r
}

// outlivingRetention is req with a lease ten times the retention, so that a
// store counting retention from the claim's lease instead of from Complete
// or Release is caught.
func (e *env) outlivingRetention(key string) idempotency.ClaimRequest {
	r := e.req(key)
	r.Lease = 10 * e.h.Retention
	return r
}

func (e *env) claim(req idempotency.ClaimRequest) idempotency.ClaimResult {
	e.t.Helper()
	res, err := e.h.Store.Claim(e.ctx, req)
	require.NoError(e.t, err, "Claim(%q)", req.Key)
	return res
}

// acquire claims and requires Acquired with the given attempt number.
func (e *env) acquire(req idempotency.ClaimRequest, attempt int) idempotency.ClaimResult {
	e.t.Helper()
	res := e.claim(req)
	require.Equal(e.t, idempotency.Acquired, res.Status, "Claim(%q) status", req.Key)
	require.Equal(e.t, attempt, res.Lease.Attempt, "Claim(%q) attempt", req.Key)
	require.Equal(e.t, req.Namespace, res.Lease.Namespace, "lease namespace")
	require.Equal(e.t, req.Key, res.Lease.Key, "lease key")
	require.NotEmpty(e.t, res.Lease.Token, "lease token")
	require.False(e.t, res.Lease.Until.IsZero(), "lease until")
	return res
}

func (e *env) complete(l idempotency.Lease, o idempotency.Outcome) {
	e.t.Helper()
	require.NoError(e.t, e.h.Store.Complete(e.ctx, l, o), "Complete(%q)", l.Key)
}

func (e *env) release(l idempotency.Lease, f idempotency.Failure) {
	e.t.Helper()
	require.NoError(e.t, e.h.Store.Release(e.ctx, l, f), "Release(%q)", l.Key)
}

func (e *env) get(key string) idempotency.Record {
	e.t.Helper()
	rec, err := e.h.Store.Get(e.ctx, e.ns, key)
	require.NoError(e.t, err, "Get(%q)", key)
	return rec
}

func (e *env) requireNotFound(key string) {
	e.t.Helper()
	_, err := e.h.Store.Get(e.ctx, e.ns, key)
	require.ErrorIs(e.t, err, idempotency.ErrNotFound, "Get(%q)", key)
}

// expireLeases moves the clock past every lease taken with short.
func (e *env) expireLeases() {
	e.t.Helper()
	e.h.Advance(e.t, e.h.Lease+e.h.Lease/2)
}

// expireRecords moves the clock past the retention.
func (e *env) expireRecords() {
	e.t.Helper()
	e.h.Advance(e.t, e.h.Retention+e.h.Retention/2)
}

// requireSameRecord checks that nothing a failed call could have touched
// changed. ExpiresAt is left out: a store may derive it from a TTL.
func requireSameRecord(t *testing.T, want, got idempotency.Record) {
	t.Helper()
	require.Equal(t, want.State, got.State, "state")
	require.Equal(t, want.Fingerprint, got.Fingerprint, "fingerprint")
	require.Equal(t, want.Token, got.Token, "token")
	require.Equal(t, want.Attempts, got.Attempts, "attempts")
	require.Equal(t, want.Canceled, got.Canceled, "canceled")
	require.WithinDuration(t, want.LeaseUntil, got.LeaseUntil, timeTolerance, "lease until")
	require.Equal(t, want.Outcome, got.Outcome, "outcome")
	require.Equal(t, want.History, got.History, "history")
}

// A failure with every field set.
var testFailure = idempotency.Failure{
	Error:     "charge card: gateway timeout",
	ErrorType: "*fmt.wrapError > *net.OpError",
	Reason:    "error",
	Stack:     "goroutine 7 [running]:\nmain.handler(...)\n\t/src/main.go:42 +0x1d",
}

func cloneOutcome(o idempotency.Outcome) idempotency.Outcome {
	var c idempotency.Outcome
	for _, m := range o.Messages {
		cm := idempotency.StoredMessage{UUID: m.UUID}
		if m.Payload != nil {
			cm.Payload = append([]byte{}, m.Payload...)
		}
		if m.Metadata != nil {
			cm.Metadata = make(map[string]string, len(m.Metadata))
			for k, v := range m.Metadata {
				cm.Metadata[k] = v
			}
		}
		c.Messages = append(c.Messages, cm)
	}
	return c
}
