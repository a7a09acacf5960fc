package idempotencytest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/record"
)

// The state machine is written once, as pure functions over a record
// (internal/record): memstore and sqlstore run them, and Transitions holds
// every store to them, redisstore's Lua scripts included. Each scenario
// drives the store under test and the model (the pure functions on a
// record of their own, on a clock that moves with Harness.Advance) through
// the same calls, and requires the same answers and, after every call,
// the same record. Times are compared only where they are set: the
// store's clock is not the model's.

// stepKind is what one step of a scenario does.
type stepKind int

const (
	doClaim stepKind = iota
	doComplete
	doRelease
	doExtend
	doExpireLeases // move the clock past the harness's (short) lease
	doPassDelay    // move the clock past a retry-after delay of the retention
)

// step is one call of a scenario. A claim is e.req's, changed by the
// fields set; complete, release and extend use the lease of the lease-th
// acquired claim of the scenario.
type step struct {
	kind    stepKind
	fp      string // fingerprint; fpA if empty
	budget  int    // MaxAttempts; 3 if 0
	short   bool   // the harness's expiring lease
	reopen  string
	lease   int
	failure idempotency.Failure
	outcome string // UUID of the one message of a Complete's outcome
}

func claimOf(mod ...func(*step)) step {
	s := step{kind: doClaim}
	for _, m := range mod {
		m(&s)
	}
	return s
}

func withBudget(n int) func(*step)          { return func(s *step) { s.budget = n } }
func withReopen(id string) func(*step)      { return func(s *step) { s.reopen = id } }
func withFingerprint(fp string) func(*step) { return func(s *step) { s.fp = fp } }
func shortLease(s *step)                    { s.short = true }

func completeOf(lease int, uuid string) step {
	return step{kind: doComplete, lease: lease, outcome: uuid}
}

func releaseOf(lease int, f idempotency.Failure) step {
	return step{kind: doRelease, lease: lease, failure: f}
}

func extendOf(lease int) step { return step{kind: doExtend, lease: lease} }

var (
	expireLeases = step{kind: doExpireLeases}
	passDelay    = step{kind: doPassDelay}
	failed       = idempotency.Failure{Error: "gateway timeout", ErrorType: "*net.OpError", Reason: "error"}
	canceled     = idempotency.Failure{Error: "context canceled", Reason: "canceled", Canceled: true}
	final        = idempotency.Failure{Error: "card declined", Reason: "permanent", Final: true, Stack: "main.pay()"}
	delayed      = idempotency.Failure{Error: "rate limited", Reason: "error"} // RetryAfter set by the scenario
)

// transitions are the scenarios of Transitions.
var transitions = []struct {
	name  string
	steps []step
}{
	{"CompleteThenDuplicates", []step{
		claimOf(), completeOf(0, "m-1"), claimOf(), claimOf(withFingerprint(fpB)),
		completeOf(0, "m-2"), releaseOf(0, failed), extendOf(0), claimOf(withReopen("r1")),
	}},
	{"ReleaseCancelFinalReopen", []step{
		claimOf(withBudget(2)), releaseOf(0, failed),
		claimOf(withBudget(2)), releaseOf(1, canceled),
		claimOf(withBudget(2)), releaseOf(2, final),
		claimOf(withBudget(2)), claimOf(withBudget(2), withReopen("r1")), releaseOf(3, failed),
		claimOf(withBudget(1), withReopen("r1")), claimOf(withBudget(1), withReopen("r2")),
		completeOf(4, "m-1"), claimOf(withReopen("r3")),
	}},
	{"CrashLoop", []step{
		claimOf(withBudget(2), shortLease), expireLeases,
		claimOf(withBudget(2), shortLease), expireLeases,
		claimOf(withBudget(2)), claimOf(withBudget(2)),
		completeOf(1, "late"), releaseOf(1, failed),
	}},
	{"ExpiredLeaseReopened", []step{
		claimOf(withBudget(1), shortLease), expireLeases,
		claimOf(withBudget(1), withReopen("r1")), releaseOf(1, canceled), claimOf(withBudget(1), withReopen("r1")),
	}},
	{"RetryAfter", []step{
		claimOf(), releaseOf(0, delayed), claimOf(), claimOf(withReopen("r1")), passDelay,
		claimOf(), completeOf(1, "m-1"),
	}},
	{"ExtendAndStaleOwner", []step{
		claimOf(shortLease), extendOf(0), expireLeases, claimOf(),
		completeOf(0, "m-1"), extendOf(0), claimOf(),
	}},
	{"TakeoverFencesStaleOwner", []step{
		claimOf(shortLease), expireLeases, claimOf(),
		completeOf(0, "stale"), releaseOf(0, final), extendOf(0),
		releaseOf(1, final), claimOf(), claimOf(withFingerprint(fpB)),
	}},
	{"ReopenCreatesRecord", []step{
		claimOf(withReopen("r1"), withBudget(1)), releaseOf(0, failed),
		claimOf(withReopen("r1"), withBudget(1)), claimOf(withReopen("r2"), withBudget(1)),
	}},
}

func testTransitions(t *testing.T, e *env) {
	for _, sc := range transitions {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			// A Harness of its own: the scenario moves its clock.
			se := setup(t, e.newHarness)
			m := &machine{e: se, key: sc.name, now: time.Unix(1_800_000_000, 0)}
			for i, st := range sc.steps {
				m.run(i, st)
				m.requireSameRecord(i)
			}
		})
	}
}

// machine runs a scenario on the store and on the model.
type machine struct {
	e      *env
	key    string
	now    time.Time           // the model's clock
	rec    *idempotency.Record // the model's record
	leases []leasePair         // the acquired claims
	tokens int
}

// leasePair is one acquired claim's lease from the store and from the model.
type leasePair struct{ store, model idempotency.Lease }

func (m *machine) run(i int, st step) {
	e := m.e
	name := fmt.Sprintf("step %d", i)
	switch st.kind {
	case doClaim:
		m.claim(name, st)
	case doComplete:
		l := m.leases[st.lease]
		out := idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: st.outcome, Payload: []byte("p")}}}
		err := e.h.Store.Complete(e.ctx, l.store, out)
		next, want := record.Complete(m.current(), l.model, out, m.now, e.h.Retention)
		m.requireSameError(name+": Complete", want, err)
		m.keep(next)
	case doRelease:
		l := m.leases[st.lease]
		f := st.failure
		if f.Error == delayed.Error {
			f.RetryAfter = e.h.Retention
		}
		err := e.h.Store.Release(e.ctx, l.store, f)
		next, want := record.Release(m.current(), l.model, f, m.now, e.h.Retention)
		m.requireSameError(name+": Release", want, err)
		m.keep(next)
	case doExtend:
		l := m.leases[st.lease]
		_, err := e.h.Store.Extend(e.ctx, l.store, longLease)
		next, want := record.Extend(m.current(), l.model, longLease, m.now, e.h.Retention)
		m.requireSameError(name+": Extend", want, err)
		m.keep(next)
	case doExpireLeases:
		m.advance(e.h.Lease + e.h.Lease/2)
	case doPassDelay:
		m.advance(e.h.Retention + e.h.Retention/2)
	}
}

func (m *machine) advance(d time.Duration) {
	m.e.h.Advance(m.e.t, d)
	m.now = m.now.Add(d)
}

// current is the model's record as a store sees it now: none once its
// retention has passed.
func (m *machine) current() *idempotency.Record {
	if m.rec != nil && !m.now.Before(m.rec.ExpiresAt) {
		m.rec = nil
	}
	return m.rec
}

func (m *machine) keep(next *idempotency.Record) {
	if next != nil {
		m.rec = next
	}
}

func (m *machine) claim(name string, st step) {
	t, e := m.e.t, m.e
	req := e.req(m.key)
	if st.fp != "" {
		req.Fingerprint = st.fp
	}
	req.MaxAttempts = 3
	if st.budget > 0 {
		req.MaxAttempts = st.budget
	}
	if st.short {
		req.Lease = e.h.Lease
	}
	req.Reopen = st.reopen
	got := e.claim(req)
	m.tokens++
	want, next := record.Claim(m.current(), req, fmt.Sprintf("model-%d", m.tokens), m.now, e.h.Retention)
	m.keep(next)
	require.Equal(t, want.Status, got.Status, "%s: Claim status", name)
	switch want.Status {
	case idempotency.Acquired:
		require.Equal(t, want.Lease.Attempt, got.Lease.Attempt, "%s: attempt", name)
		require.Equal(t, want.Previous, got.Previous, "%s: previous", name)
		require.Equal(t, want.PreviousError, got.PreviousError, "%s: previous error", name)
		m.leases = append(m.leases, leasePair{store: got.Lease, model: want.Lease})
	case idempotency.Completed:
		require.NotNil(t, got.Outcome, "%s: outcome", name)
		require.Equal(t, *want.Outcome, *got.Outcome, "%s: outcome", name)
	case idempotency.InProgress:
		require.Positive(t, got.Wait, "%s: wait", name)
	case idempotency.Conflict:
		require.Equal(t, want.StoredFingerprint, got.StoredFingerprint, "%s: stored fingerprint", name)
	case idempotency.Exhausted:
		require.Equal(t, want.Attempts, got.Attempts, "%s: attempts", name)
		requireSameHistory(t, name+": exhausted history", want.History, got.History)
	}
}

func (m *machine) requireSameError(name string, want, got error) {
	if want == nil {
		require.NoError(m.e.t, got, name)
		return
	}
	require.True(m.e.t, errors.Is(got, want), "%s: want %v, got %v", name, want, got)
}

// requireSameRecord requires the store's record to be the model's.
func (m *machine) requireSameRecord(i int) {
	t, e := m.e.t, m.e
	name := fmt.Sprintf("step %d: Get", i)
	want := m.current()
	got, err := e.h.Store.Get(e.ctx, e.ns, m.key)
	if want == nil {
		require.ErrorIs(t, err, idempotency.ErrNotFound, name)
		return
	}
	require.NoError(t, err, name)
	require.Equal(t, want.State, got.State, "%s: state", name)
	require.Equal(t, want.Fingerprint, got.Fingerprint, "%s: fingerprint", name)
	require.Equal(t, want.Attempts, got.Attempts, "%s: attempts", name)
	require.Equal(t, want.Canceled, got.Canceled, "%s: canceled", name)
	require.Equal(t, want.BudgetBase, got.BudgetBase, "%s: budget base", name)
	require.Equal(t, want.ReopenedBy, got.ReopenedBy, "%s: reopened by", name)
	require.Equal(t, want.NotBefore.IsZero(), got.NotBefore.IsZero(), "%s: not before %v", name, got.NotBefore)
	if want.State == idempotency.StateInProgress {
		require.False(t, got.LeaseUntil.IsZero(), "%s: lease until", name)
	}
	if want.Outcome == nil {
		require.Nil(t, got.Outcome, "%s: outcome", name)
	} else {
		require.NotNil(t, got.Outcome, "%s: outcome", name)
		require.Equal(t, *want.Outcome, *got.Outcome, "%s: outcome", name)
	}
	for j, l := range m.leases {
		if l.model.Token == want.Token {
			require.Equal(t, l.store.Token, got.Token, "%s: the token is claim %d's", name, j)
		}
	}
	requireSameHistory(t, name+": history", want.History, got.History)
}

// requireSameHistory compares two attempt histories but for their times,
// of which it compares only which are set.
func requireSameHistory(t *testing.T, name string, want, got []idempotency.AttemptRecord) {
	t.Helper()
	require.Len(t, got, len(want), name)
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, w.Ended.IsZero(), g.Ended.IsZero(), "%s: attempt %d ended %v", name, i, g.Ended)
		require.False(t, g.Started.IsZero(), "%s: attempt %d started", name, i)
		w.Started, w.Ended, g.Started, g.Ended = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		require.Equal(t, w, g, "%s: attempt %d", name, i)
	}
}
