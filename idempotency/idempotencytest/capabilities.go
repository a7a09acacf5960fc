package idempotencytest

import (
	"errors"
	"fmt"
	"github.com/surely-dev/surely/internal/defaults"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/oplist"
)

// capabilityTests are the tests of the optional interfaces of package
// idempotency. Each runs when the store under test implements its
// interface and is skipped, with the reason, when it does not.
var capabilityTests = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"List/Filters", testListFilters},
	{"List/Pages", testListPages},
	{"List/Age", testListAge},
	{"List/Forgotten", testListForgotten},
	{"List/InvalidFilter", testListInvalidFilter},
	{"GetRecords", testGetRecords},
	{"GetRecords/Forgotten", testGetRecordsForgotten},
}

// lister returns the store as an idempotency.Lister, or skips the test:
// the store is none, or cannot list in its configuration (an error
// wrapping errors.ErrUnsupported).
func (e *env) lister() idempotency.Lister {
	e.t.Helper()
	l, ok := e.h.Store.(idempotency.Lister)
	if !ok {
		e.t.Skipf("%T is no idempotency.Lister", e.h.Store)
	}
	if _, err := l.List(e.ctx, idempotency.ListFilter{Namespace: e.ns, Limit: 1}); errors.Is(err, errors.ErrUnsupported) {
		e.t.Skipf("%T cannot list here: %v", e.h.Store, err)
	}
	return l
}

// recordsReader returns the store as an idempotency.RecordsReader, or
// skips the test.
func (e *env) recordsReader() idempotency.RecordsReader {
	e.t.Helper()
	rr, ok := e.h.Store.(idempotency.RecordsReader)
	if !ok {
		e.t.Skipf("%T is no idempotency.RecordsReader", e.h.Store)
	}
	return rr
}

// put makes the record of (ns, key) reach state through the Store
// contract, with the one-minute lease.
func (e *env) put(ns, key string, state idempotency.State) {
	e.t.Helper()
	req := e.req(key)
	req.Namespace, req.MaxAttempts = ns, 3
	res := e.claim(req)
	require.Equal(e.t, idempotency.Acquired, res.Status, "Claim(%s/%s)", ns, key)
	switch state {
	case idempotency.StateFailed, idempotency.StateExhausted:
		e.release(res.Lease, idempotency.Failure{Error: "boom " + key, Reason: "error", Final: state == idempotency.StateExhausted})
	case idempotency.StateDone:
		e.complete(res.Lease, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u-" + key, Payload: []byte("x")}}})
	}
}

// walk reads every page of f, checking each page (every record matches f,
// has no outcome, and is listed once in its page), and returns
// "namespace/key" of each record, sorted, each once: a store may list a
// record on two pages.
func (e *env) walk(l idempotency.Lister, f idempotency.ListFilter) []string {
	e.t.Helper()
	out := []string{}
	for pages := 0; ; pages++ {
		require.Less(e.t, pages, 10000, "the listing of %+v does not end", f)
		page, err := l.List(e.ctx, f)
		require.NoError(e.t, err, "List(%+v)", f)
		require.False(e.t, page.Now.IsZero(), "the page's Now")
		inPage := map[string]bool{}
		for _, r := range page.Records {
			id := r.Namespace + "/" + r.Key
			require.False(e.t, inPage[id], "%s listed twice in one page", id)
			inPage[id] = true
			require.True(e.t, oplist.Match(f, r.Record, r.Updated, page.Now), "%s does not match %+v", id, f)
			require.Nil(e.t, r.Outcome, "%s: a listing reads no outcome", id)
			out = append(out, id)
		}
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// The filters select by namespace, key (in every namespace, or in one),
// and state, alone and together; a listed record has the fields Get
// gives (but its outcome) and when it last changed.
func testListFilters(t *testing.T, e *env) {
	l := e.lister()
	a, b := e.ns, randomNamespace()
	sfx := b[len("ct-"):] // keys no other test uses, for filters across namespaces
	k := func(i int) string { return fmt.Sprintf("k%d-%s", i, sfx) }
	e.put(a, k(1), idempotency.StateInProgress)
	e.put(a, k(2), idempotency.StateFailed)
	e.put(a, k(3), idempotency.StateExhausted)
	e.put(a, k(4), idempotency.StateDone)
	for i := 1; i <= 5; i++ {
		e.put(b, k(i), idempotency.StateExhausted)
	}
	id := func(ns string, i int) string { return ns + "/" + k(i) }
	sorted := func(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }

	require.Equal(t, []string{id(a, 1), id(a, 2), id(a, 3), id(a, 4)},
		e.walk(l, idempotency.ListFilter{Namespace: a, Limit: 3}), "namespace")
	require.Equal(t, []string{id(a, 3)},
		e.walk(l, idempotency.ListFilter{Namespace: a, State: idempotency.StateExhausted}), "state")
	require.Equal(t, []string{id(a, 1)},
		e.walk(l, idempotency.ListFilter{Namespace: a, State: idempotency.StateInProgress}), "state")
	require.Equal(t, []string{id(a, 4)},
		e.walk(l, idempotency.ListFilter{Namespace: a, State: idempotency.StateDone}), "state")
	require.Equal(t, sorted(id(a, 2), id(b, 2)),
		e.walk(l, idempotency.ListFilter{Key: k(2), Limit: 1}), "a key in every namespace")
	require.Equal(t, []string{id(a, 2)},
		e.walk(l, idempotency.ListFilter{Key: k(2), State: idempotency.StateFailed}), "a key in every namespace, in a state")
	require.Equal(t, []string{id(b, 2)},
		e.walk(l, idempotency.ListFilter{Namespace: b, Key: k(2)}), "a key in one namespace")
	require.Empty(t, e.walk(l, idempotency.ListFilter{Key: k(9)}), "a key without records")
	require.Empty(t, e.walk(l, idempotency.ListFilter{Namespace: randomNamespace()}), "a namespace without records")

	page, err := l.List(e.ctx, idempotency.ListFilter{Namespace: a, Key: k(2)})
	require.NoError(t, err)
	require.Len(t, page.Records, 1)
	got, want := page.Records[0], e.get(k(2))
	require.Equal(t, want.State, got.State)
	require.Equal(t, idempotency.StateFailed, got.State)
	require.Equal(t, want.Fingerprint, got.Fingerprint)
	require.Equal(t, want.Token, got.Token)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, want.History, got.History)
	require.Equal(t, "boom "+k(2), got.History[0].Error)
	require.WithinDuration(t, want.ExpiresAt, got.ExpiresAt, time.Second)
	require.True(t, got.ExpiresAt.After(page.Now), "a listed record is live")
	require.False(t, got.Updated.IsZero(), "when it last changed")
	require.False(t, got.Updated.After(page.Now.Add(timeTolerance)), "changed before the page was read")
	require.WithinDuration(t, page.Now, got.Updated, time.Minute)
	require.Empty(t, e.walk(l, idempotency.ListFilter{Namespace: a, OlderThan: time.Hour}), "every record changed just now")
}

// The zero filter lists every record; a walk with one record a page
// reads every record once its cursor moves past it.
func testListPages(t *testing.T, e *env) {
	l := e.lister()
	var want []string
	for i := range 5 {
		key := fmt.Sprintf("p%d", i)
		e.put(e.ns, key, []idempotency.State{idempotency.StateInProgress, idempotency.StateDone, idempotency.StateFailed}[i%3])
		want = append(want, e.ns+"/"+key)
	}
	require.Equal(t, want, e.walk(l, idempotency.ListFilter{Namespace: e.ns, Limit: 1}), "a page of one")
	every := e.walk(l, idempotency.ListFilter{})
	for _, id := range want {
		require.Contains(t, every, id, "the zero filter lists every record")
	}
}

// OlderThan selects the records whose last change is at least that old
// by the store's clock.
func testListAge(t *testing.T, e *env) {
	l := e.lister()
	e.put(e.ns, "old", idempotency.StateInProgress) // one-minute lease: still live below
	e.h.Advance(t, 2*e.h.Lease)
	got := e.walk(l, idempotency.ListFilter{Namespace: e.ns, OlderThan: e.h.Lease})
	require.Equal(t, []string{e.ns + "/old"}, got)
	e.put(e.ns, "new", idempotency.StateInProgress)
	got = e.walk(l, idempotency.ListFilter{Namespace: e.ns, OlderThan: time.Hour})
	require.Empty(t, got, "no record is an hour old")
	require.Equal(t, []string{e.ns + "/new", e.ns + "/old"}, e.walk(l, idempotency.ListFilter{Namespace: e.ns}))
}

// A record past its retention is not listed.
func testListForgotten(t *testing.T, e *env) {
	l := e.lister()
	e.put(e.ns, "done", idempotency.StateDone)
	e.put(e.ns, "failed", idempotency.StateFailed)
	e.put(e.ns, "exhausted", idempotency.StateExhausted)
	require.Len(t, e.walk(l, idempotency.ListFilter{Namespace: e.ns}), 3)
	e.expireRecords()
	require.Empty(t, e.walk(l, idempotency.ListFilter{Namespace: e.ns}))
}

// An invalid filter is an error wrapping ErrInvalidRequest, as Validate
// says.
func testListInvalidFilter(t *testing.T, e *env) {
	l := e.lister()
	for _, f := range []idempotency.ListFilter{
		{State: "stuck"}, {Namespace: "a:b"}, {Namespace: e.ns, Limit: -1},
		{Namespace: e.ns, Limit: defaults.MaxListLimit + 1}, {Namespace: e.ns, OlderThan: -time.Second},
	} {
		require.ErrorIs(t, f.Validate(), idempotency.ErrInvalidRequest, "%+v", f)
		_, err := l.List(e.ctx, f)
		require.ErrorIs(t, err, idempotency.ErrInvalidRequest, "%+v", f)
	}
	require.NoError(t, idempotency.ListFilter{Namespace: e.ns, Limit: defaults.MaxListLimit}.Validate())
}

// GetRecords says of each key what Get says: state, reopening run,
// expiry; a key without a record, every key of another namespace and of
// an invalid one are absent.
func testGetRecords(t *testing.T, e *env) {
	rr := e.recordsReader()
	e.put(e.ns, "done", idempotency.StateDone)
	e.put(e.ns, "failed", idempotency.StateFailed)
	e.put(e.ns, "exhausted", idempotency.StateExhausted)
	e.put(e.ns, "running", idempotency.StateInProgress)
	reopened := reopen(e.req("reopened"), "run-1")
	e.release(e.acquire(reopened, 1).Lease, idempotency.Failure{Error: "again", Reason: "error"})

	keys := []string{"done", "failed", "exhausted", "running", "reopened", "missing", "bad\x00key"}
	got, err := rr.GetRecords(e.ctx, e.ns, keys)
	require.NoError(t, err)
	require.Len(t, got, 5, "the keys without a record are absent")
	for key, state := range map[string]idempotency.State{
		"done": idempotency.StateDone, "failed": idempotency.StateFailed, "exhausted": idempotency.StateExhausted,
		"running": idempotency.StateInProgress, "reopened": idempotency.StateFailed,
	} {
		rec, ok := got[key]
		require.True(t, ok, key)
		one := e.get(key)
		require.Equal(t, state, rec.State, key)
		require.Equal(t, one.State, rec.State, key)
		require.Equal(t, one.ReopenedBy, rec.ReopenedBy, key)
		require.Equal(t, e.ns, rec.Namespace, key)
		require.Equal(t, key, rec.Key, key)
		require.WithinDuration(t, one.ExpiresAt, rec.ExpiresAt, time.Second, key)
	}
	require.Equal(t, "run-1", got["reopened"].ReopenedBy)

	none, err := rr.GetRecords(e.ctx, randomNamespace(), []string{"done"})
	require.NoError(t, err)
	require.Empty(t, none, "another namespace")
	bad, err := rr.GetRecords(e.ctx, "bad:ns", []string{"done"})
	require.NoError(t, err)
	require.Empty(t, bad, "an invalid namespace has no records")
	empty, err := rr.GetRecords(e.ctx, e.ns, nil)
	require.NoError(t, err)
	require.Empty(t, empty, "no keys")
}

// A record past its retention is absent.
func testGetRecordsForgotten(t *testing.T, e *env) {
	rr := e.recordsReader()
	e.put(e.ns, "done", idempotency.StateDone)
	e.put(e.ns, "failed", idempotency.StateFailed)
	got, err := rr.GetRecords(e.ctx, e.ns, []string{"done", "failed"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	e.expireRecords()
	got, err = rr.GetRecords(e.ctx, e.ns, []string{"done", "failed"})
	require.NoError(t, err)
	require.Empty(t, got)
}
