package archivetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/archivekit"
	dlqenv "github.com/surely-dev/surely/internal/envelope"
)

// Run runs every conformance test as a parallel subtest; newArchive is
// called once per subtest and must return an empty archive. The tests of
// an optional interface of package archive (archive.ArrivalCounter) run
// when the archive implements it and are skipped otherwise.
func Run(t *testing.T, newArchive func(t *testing.T) archive.Archive) {
	t.Helper()
	require.NotNil(t, newArchive, "newArchive")
	for _, tc := range slices.Concat(tests, capabilityTests) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newArchive(t)
			require.NotNil(t, a, "newArchive returned nil")
			tc.fn(t, &env{t: t, a: a, ctx: t.Context()})
		})
	}
}

// env is one subtest's view of the archive under test.
type env struct {
	t   *testing.T
	a   archive.Archive
	ctx context.Context
}

// base is the dead-lettering time of the fixtures: well in the past, so an
// entry stamped with the archive's clock is newer than every fixture.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// rootCause is the innermost error type of the fixtures' error chains.
type rootCause struct{ text string }

func (e *rootCause) Error() string { return e.text }

// letter describes one dead letter to build.
type letter struct {
	source    string // UUID of the source message
	reason    dlq.Reason
	topic     string
	handler   string
	key       string
	namespace string
	err       string
	attempts  int
	at        time.Time
	payload   []byte
	md        map[string]string
	// site is the call site the envelope names (as the dead-letter step
	// writes it for an error with a stack); none when empty.
	site string
}

// envelope builds the dead letter of l the way the dead-letter step does.
func envelope(l letter) *message.Message {
	src := message.NewMessage(l.source, l.payload)
	for k, v := range l.md {
		src.Metadata[k] = v
	}
	fe := dlq.Final(l.reason, fmt.Errorf("handle: %w", &rootCause{l.err}))
	fe.Attempts, fe.OperationKey, fe.Fingerprint = l.attempts, l.key, "fp-"+l.key
	f := dlq.FailureFrom(fe)
	f.Topic, f.Handler, f.Namespace, f.At = l.topic, l.handler, l.namespace, l.at
	out := dlq.Wrap(src, f, nil, "host-1", "group-1")
	if l.site != "" {
		out.Metadata.Set(dlq.KeyErrorSite, l.site)
	}
	return out
}

func (e *env) publish(msgs ...*message.Message) {
	e.t.Helper()
	require.NoError(e.t, e.a.Publish("dead", msgs...))
}

// markReplayed marks one existing entry replayed by run.
func (e *env) markReplayed(id, run string) {
	e.t.Helper()
	n, err := e.a.Mark(e.ctx, archive.Mark{To: archive.StateReplayed, Run: run}, id)
	require.NoError(e.t, err)
	require.Equal(e.t, 1, n, "Mark(%q)", id)
}

func (e *env) get(id string) archive.Entry {
	e.t.Helper()
	got, err := e.a.Get(e.ctx, id)
	require.NoError(e.t, err, "Get(%q)", id)
	return got
}

// listAll pages through everything f selects with page size limit.
func (e *env) listAll(f archive.Filter, limit int) []archive.Entry {
	e.t.Helper()
	var out []archive.Entry
	var after int64
	for range 10000 {
		page, err := e.a.List(e.ctx, f, archive.Page{After: after, Limit: limit})
		require.NoError(e.t, err)
		if len(page) == 0 {
			return out
		}
		eff := limit
		if eff <= 0 {
			eff = archivekit.DefaultPageSize
		}
		require.LessOrEqual(e.t, len(page), eff, "page larger than its limit")
		out = append(out, page...)
		after = page[len(page)-1].Seq
	}
	e.t.Fatal("List never ends")
	return nil
}

func ids(entries []archive.Entry) []string {
	out := make([]string, len(entries))
	for i, en := range entries {
		out[i] = en.ID
	}
	return out
}

// requireSameMessage checks UUID, payload and metadata byte for byte.
func requireSameMessage(t *testing.T, want, got *message.Message) {
	t.Helper()
	require.NotNil(t, got, "entry without message")
	require.Equal(t, want.UUID, got.UUID)
	require.Equal(t, []byte(want.Payload), []byte(got.Payload), "payload")
	require.Len(t, got.Metadata, len(want.Metadata), "metadata keys: %v", got.Metadata)
	for k, v := range want.Metadata {
		g, ok := got.Metadata[k]
		require.True(t, ok, "metadata key %q missing", k)
		require.Equal(t, v, g, "metadata %q", k)
	}
}

func requireTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s: want %v, got %v", what, want, got)
}

var tests = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"PublishStoresEnvelope", testPublishStoresEnvelope},
	{"PublishIsIdempotentByUUID", testIdempotent},
	{"SeqIncreases", testSeqIncreases},
	{"CursorUnderConcurrentPublish", testCursorUnderConcurrentPublish},
	{"NotAnEnvelopeIsArchived", testNotAnEnvelope},
	{"MessageWithoutUUIDIsRefused", testNoUUID},
	{"EntriesAreCopies", testEntriesAreCopies},
	{"GetMissing", testGetMissing},
	{"ListFilters", testListFilters},
	{"ListPages", testListPages},
	{"ListOmitsPayload", testListOmitsPayload},
	{"Stats", testStats},
	{"StatsFollowEveryChange", testStatsFollowChanges},
	{"StatsUnderConcurrentWrites", testStatsUnderConcurrentWrites},
	{"Delete", testDelete},
	{"MarkReplayed", testMarkReplayed},
	{"Lifecycle", testLifecycle},
	{"FailedAgain", testFailedAgain},
	{"ReplayRuns", testReplayRuns},
	{"ListReplays", testListReplays},
	{"ConcurrentPublishers", testConcurrent},
	{"HandlerDeadLettersIntoArchive", testHandlerDeadLetter},
	{"LongValuesAreArchived", testLongValues},
	{"TrailingSpacesAreDistinct", testTrailingSpaces},
}

func testPublishStoresEnvelope(t *testing.T, e *env) {
	payload := []byte{0x00, 0xff, 0xfe, 'o', 'k', 0x80, 0xc3, 0x28, '\n', 0}
	l := letter{
		source: "src-1", reason: dlq.ReasonExhausted, topic: "orders", handler: "ship", key: "order-42",
		namespace: "shipping", err: "warehouse: connection refused", attempts: 5, at: base, payload: payload,
		md:   map[string]string{"tenant": "acme", "ce_id": "évènement\t1", "empty": "", "quote": `"a'b\"`},
		site: "warehouse.(*Client).Ship (client.go:42)",
	}
	env := envelope(l)
	before := time.Now()
	e.publish(env)
	after := time.Now()

	got := e.get(env.UUID)
	require.Equal(t, dlqenv.DeadLetterUUID("src-1"), got.ID)
	requireSameMessage(t, env, got.Message)
	require.Positive(t, got.Seq)
	require.Equal(t, 1, got.Copies)
	require.Equal(t, dlq.ReasonExhausted, got.Reason)
	require.Equal(t, "orders", got.OriginalTopic)
	require.Equal(t, "ship", got.Handler)
	require.Equal(t, "group-1", got.ConsumerGroup)
	require.Equal(t, "shipping", got.Namespace)
	require.Equal(t, "order-42", got.OperationKey)
	require.Equal(t, "handle: warehouse: connection refused", got.Error)
	require.Equal(t, "*fmt.wrapError > *archivetest.rootCause", got.ErrorTypes)
	require.Equal(t, l.site, got.ErrorSite)
	require.Equal(t, 5, got.Attempts)
	requireTime(t, base, got.DeadLetteredAt, "DeadLetteredAt")
	require.Empty(t, got.ReplayedBy)
	// ArchivedAt comes from the archive's clock (a server's, perhaps): allow skew.
	require.False(t, got.ArchivedAt.Before(before.Add(-time.Minute)), "ArchivedAt %v too early", got.ArchivedAt)
	require.False(t, got.ArchivedAt.After(after.Add(time.Minute)), "ArchivedAt %v too late", got.ArchivedAt)
	for _, omit := range []bool{false, true} {
		page, err := e.a.List(e.ctx, archive.Filter{IDs: []string{env.UUID}}, archive.Page{OmitPayload: omit})
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, l.site, page[0].ErrorSite, "List, OmitPayload %v", omit)
	}
}

func testIdempotent(t *testing.T, e *env) {
	l := letter{source: "src-dup", reason: dlq.ReasonExhausted, topic: "orders", handler: "h", key: "k", err: "x", attempts: 3, at: base, payload: []byte("p")}
	first := envelope(l)
	e.publish(first)
	one := e.get(first.UUID)

	other := envelope(letter{source: "src-other", reason: dlq.ReasonPermanent, at: base, payload: []byte("q")})
	e.publish(other)
	// A later copy (another delivery) has the same UUID; it may differ in
	// its envelope, the first copy is kept.
	l.attempts, l.payload = 4, []byte("p2")
	e.publish(envelope(l))
	e.publish(envelope(l))

	two := e.get(first.UUID)
	require.Equal(t, 3, two.Copies)
	require.Equal(t, one.Seq, two.Seq, "a copy keeps the entry's Seq")
	requireTime(t, one.ArchivedAt, two.ArchivedAt, "ArchivedAt")
	requireSameMessage(t, first, two.Message)
	require.Equal(t, 3, two.Attempts)
	all := e.listAll(archive.Filter{}, 0)
	require.Equal(t, []string{first.UUID, other.UUID}, ids(all))
	st, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, 2, st.Total, "copies are one entry")
}

func testSeqIncreases(t *testing.T, e *env) {
	var want []string
	var batch []*message.Message
	for i := range 6 {
		m := envelope(letter{source: fmt.Sprintf("seq-%d", i), reason: dlq.ReasonPermanent, at: base, payload: []byte{byte(i)}})
		want = append(want, m.UUID)
		if i < 3 {
			e.publish(m)
		} else {
			batch = append(batch, m)
		}
	}
	e.publish(batch...) // several messages in one call keep their order
	all := e.listAll(archive.Filter{}, 0)
	require.Equal(t, want, ids(all))
	for i := 1; i < len(all); i++ {
		require.Greater(t, all[i].Seq, all[i-1].Seq)
	}
	// Seq is never reused: an entry published after a Delete gets a new one.
	last := all[len(all)-1]
	n, err := e.a.Delete(e.ctx, last.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	m := envelope(letter{source: "seq-after-delete", reason: dlq.ReasonPermanent, at: base})
	e.publish(m)
	require.Greater(t, e.get(m.UUID).Seq, last.Seq)
}

func testNotAnEnvelope(t *testing.T, e *env) {
	m := message.NewMessage("plain-1", []byte{0xde, 0xad, 0xbe, 0xef, 0xff})
	m.Metadata.Set("origin", "broker")
	e.publish(m)
	got := e.get("plain-1")
	requireSameMessage(t, m, got.Message)
	require.Empty(t, got.Reason)
	require.Empty(t, got.OriginalTopic)
	require.Zero(t, got.Attempts)
	require.False(t, got.DeadLetteredAt.IsZero(), "DeadLetteredAt falls back to ArchivedAt")
	requireTime(t, got.ArchivedAt, got.DeadLetteredAt, "DeadLetteredAt")

	// Bare message: no metadata, no payload.
	e.publish(message.NewMessage("plain-2", nil))
	got2 := e.get("plain-2")
	require.Empty(t, got2.Message.Payload)
	require.Empty(t, got2.Message.Metadata)

	st, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, 2, st.Total)
	require.Equal(t, 2, st.ByReason[""], "counted under the empty reason: %v", st.ByReason)
}

func testNoUUID(t *testing.T, e *env) {
	err := e.a.Publish("dead", message.NewMessage("", []byte("no id")))
	require.ErrorIs(t, err, archive.ErrNoID)
	all := e.listAll(archive.Filter{}, 0)
	require.Empty(t, all, "nothing half-stored")
}

func testEntriesAreCopies(t *testing.T, e *env) {
	m := envelope(letter{source: "copy-1", reason: dlq.ReasonPermanent, at: base, payload: []byte("abc"), md: map[string]string{"a": "1"}})
	want := archivekit.CopyMessage(m)
	e.publish(m)
	// The caller may reuse its message after Publish.
	m.Payload[0] = 'X'
	m.Metadata["a"] = "changed"
	got := e.get(m.UUID)
	requireSameMessage(t, want, got.Message)
	// Changing a returned entry does not change the archive.
	got.Message.Payload[1] = 'Y'
	got.Message.Metadata["a"] = "2"
	requireSameMessage(t, want, e.get(m.UUID).Message)
}

func testGetMissing(t *testing.T, e *env) {
	_, err := e.a.Get(e.ctx, "no-such-entry")
	require.ErrorIs(t, err, archive.ErrNotFound)
}

// fixtures publishes a varied set of dead letters and returns them in Seq order.
func (e *env) fixtures() []*message.Message {
	e.t.Helper()
	letters := []letter{
		{source: "f0", reason: dlq.ReasonExhausted, topic: "orders", handler: "ship", key: "k0", err: "db timeout", attempts: 5, at: base},
		{source: "f1", reason: dlq.ReasonPermanent, topic: "orders", handler: "bill", key: "k1", err: "card declined", attempts: 1, at: base.Add(time.Minute)},
		{source: "f2", reason: dlq.ReasonExhausted, topic: "payments", handler: "ship", key: "k2", err: "db refused", attempts: 5, at: base.Add(2 * time.Minute),
			md: map[string]string{dlq.KeyReplayID: "run-1", dlq.KeyReplayOf: "x"}},
		{source: "f3", reason: dlq.ReasonConflict, topic: "payments", handler: "bill", key: "k0", err: "Timeout 100%_ [x]", attempts: 1, at: base.Add(3 * time.Minute),
			md: map[string]string{dlq.KeyReplayID: "run-2"}},
		{source: "f4", reason: dlq.ReasonExhausted, topic: "orders", handler: "ship", key: "k4", err: "db timeout", attempts: 5, at: base.Add(4 * time.Minute),
			md: map[string]string{dlq.KeyReplayID: "run-1"}},
	}
	var out []*message.Message
	for _, l := range letters {
		l.payload = []byte("payload-" + l.source)
		m := envelope(l)
		e.publish(m)
		out = append(out, m)
	}
	plain := message.NewMessage("f5-plain", []byte("raw"))
	e.publish(plain)
	return append(out, plain)
}

func testListFilters(t *testing.T, e *env) {
	f := e.fixtures()
	id := func(i ...int) []string {
		out := []string{}
		for _, n := range i {
			out = append(out, f[n].UUID)
		}
		return out
	}
	e.markReplayed(f[0].UUID, "run-1")
	e.markReplayed(f[1].UUID, "run-2")

	cases := []struct {
		name string
		f    archive.Filter
		want []string
	}{
		{"all", archive.Filter{}, id(0, 1, 2, 3, 4, 5)},
		{"ids", archive.Filter{IDs: []string{f[4].UUID, f[1].UUID, "missing"}}, id(1, 4)},
		{"reason", archive.Filter{Reason: dlq.ReasonExhausted}, id(0, 2, 4)},
		{"topic", archive.Filter{Topic: "payments"}, id(2, 3)},
		{"handler", archive.Filter{Handler: "bill"}, id(1, 3)},
		{"key", archive.Filter{Key: "k0"}, id(0, 3)},
		{"error contains", archive.Filter{ErrorContains: "timeout"}, id(0, 4)},
		{"error contains is literal", archive.Filter{ErrorContains: "100%_ [x]"}, id(3)},
		{"error contains wildcard chars match nothing else", archive.Filter{ErrorContains: "%"}, id(3)},
		{"error contains underscore", archive.Filter{ErrorContains: "_"}, id(3)},
		{"after", archive.Filter{DeadLetteredAfter: base.Add(time.Minute)}, id(2, 3, 4, 5)},
		{"before", archive.Filter{DeadLetteredBefore: base.Add(2 * time.Minute)}, id(0, 1)},
		{"window", archive.Filter{DeadLetteredAfter: base, DeadLetteredBefore: base.Add(3*time.Minute + time.Nanosecond)}, id(1, 2, 3)},
		{"replay id", archive.Filter{ReplayID: "run-1"}, id(2, 4)},
		{"not replayed by", archive.Filter{NotReplayedBy: "run-1"}, id(1, 2, 3, 4, 5)},
		{"combined", archive.Filter{Reason: dlq.ReasonExhausted, Topic: "orders", ErrorContains: "db", NotReplayedBy: "run-1"}, id(4)},
		{"combined replay", archive.Filter{ReplayID: "run-1", Topic: "payments"}, id(2)},
		{"no match", archive.Filter{Topic: "orders", Handler: "nobody"}, id()},
		{"error type", archive.Filter{ErrorType: "*archivetest.rootCause"}, id(0, 1, 2, 3, 4)},
		{"error type is the root cause", archive.Filter{ErrorType: "*fmt.wrapError"}, id()},
		{"error type and topic", archive.Filter{ErrorType: "*archivetest.rootCause", Topic: "payments"}, id(2, 3)},
		{"error site", archive.Filter{ErrorSite: "billing.charge (charge.go:7)"}, id()},
		{"search matches the key", archive.Filter{Search: "k4"}, id(4)},
		{"search matches the error", archive.Filter{Search: "declined"}, id(1)},
		{"search matches either", archive.Filter{Search: "k"}, id(0, 1, 2, 3, 4)},
		{"search is literal", archive.Filter{Search: "%_ [x]"}, id(3)},
		{"search and reason", archive.Filter{Search: "Timeout", Reason: dlq.ReasonConflict}, id(3)},
	}
	for _, c := range cases {
		got := e.listAll(c.f, 0)
		require.Equal(t, c.want, ids(got), "List %s", c.name)
		for _, en := range got {
			require.True(t, c.f.Match(en), "List %s returned %s, which Filter.Match rejects", c.name, en.ID)
		}
		st, err := e.a.Stats(e.ctx, c.f)
		require.NoError(t, err)
		require.Equal(t, len(c.want), st.Total, "Stats %s", c.name)
	}
}

func testListPages(t *testing.T, e *env) {
	const n = 230
	var want, wantOdd []string
	msgs := make([]*message.Message, 0, n)
	for i := range n {
		topic := "even"
		if i%2 == 1 {
			topic = "odd"
		}
		m := envelope(letter{source: fmt.Sprintf("page-%03d", i), reason: dlq.ReasonPermanent, topic: topic, at: base.Add(time.Duration(i) * time.Second)})
		msgs = append(msgs, m)
		want = append(want, m.UUID)
		if topic == "odd" {
			wantOdd = append(wantOdd, m.UUID)
		}
	}
	for chunk := range slices.Chunk(msgs, 50) {
		e.publish(chunk...)
	}

	first, err := e.a.List(e.ctx, archive.Filter{}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, first, archivekit.DefaultPageSize, "default page size")
	require.Equal(t, want[:archivekit.DefaultPageSize], ids(first))

	neg, err := e.a.List(e.ctx, archive.Filter{}, archive.Page{Limit: -5})
	require.NoError(t, err)
	require.Len(t, neg, archivekit.DefaultPageSize, "a negative limit is the default")

	require.Equal(t, want, ids(e.listAll(archive.Filter{}, 0)))
	require.Equal(t, want, ids(e.listAll(archive.Filter{}, 7)))
	require.Equal(t, wantOdd, ids(e.listAll(archive.Filter{Topic: "odd"}, 9)), "pages of a filtered selection")
	require.Equal(t, wantOdd, ids(e.listAll(archive.Filter{Topic: "odd"}, 1)))

	// After is a Seq, not an index: resume after entry 200.
	e200 := e.get(want[200])
	rest, err := e.a.List(e.ctx, archive.Filter{}, archive.Page{After: e200.Seq, Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, want[201:], ids(rest))
	end, err := e.a.List(e.ctx, archive.Filter{}, archive.Page{After: e.get(want[n-1]).Seq})
	require.NoError(t, err)
	require.Empty(t, end)
}

func testStats(t *testing.T, e *env) {
	empty, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Zero(t, empty.Total)
	require.True(t, empty.Oldest.IsZero() && empty.Newest.IsZero(), "no times when empty")

	f := e.fixtures()
	st, err := e.a.Stats(e.ctx, archive.Filter{DeadLetteredBefore: base.Add(time.Hour)}) // the envelopes, not the plain message
	require.NoError(t, err)
	require.Equal(t, 5, st.Total)
	require.Equal(t, map[string]int{"exhausted": 3, "permanent": 1, "conflict": 1}, st.ByReason)
	require.Equal(t, map[string]int{"orders": 3, "payments": 2}, st.ByTopic)
	require.Equal(t, map[string]int{"ship": 3, "bill": 2}, st.ByHandler)
	require.Equal(t, map[string]int{"*archivetest.rootCause": 5}, st.ByErrorType, "innermost type of the chain")
	requireTime(t, base, st.Oldest, "Oldest")
	requireTime(t, base.Add(4*time.Minute), st.Newest, "Newest")

	all, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, 6, all.Total)
	require.Equal(t, 1, all.ByTopic[""], "the plain message has no topic")
	requireTime(t, e.get(f[5].UUID).ArchivedAt, all.Newest, "Newest is the plain message's arrival")

	sub, err := e.a.Stats(e.ctx, archive.Filter{Topic: "payments"})
	require.NoError(t, err)
	require.Equal(t, 2, sub.Total)
	require.Equal(t, map[string]int{"exhausted": 1, "conflict": 1}, sub.ByReason)
	requireTime(t, base.Add(2*time.Minute), sub.Oldest, "Oldest of payments")
	requireTime(t, base.Add(3*time.Minute), sub.Newest, "Newest of payments")

	none, err := e.a.Stats(e.ctx, archive.Filter{Topic: "nothing"})
	require.NoError(t, err)
	require.Zero(t, none.Total)
	require.True(t, none.Oldest.IsZero() && none.Newest.IsZero())
}

// testStatsFollowChanges checks that Stats agrees with List, breakdowns,
// times and all, after every kind of change: publishes and copies, each
// lifecycle mark (twice, and of missing IDs), and deletes. An archive that
// keeps its counts apart from its entries must change them together.
func testStatsFollowChanges(t *testing.T, e *env) {
	f := e.fixtures()
	other := envelope(letter{source: "other", reason: dlq.ReasonPanic, topic: "orders", handler: "ship", key: "k9", err: "boom", attempts: 2, at: base.Add(-time.Hour),
		site: "ship.(*Courier).Book (courier.go:42)"})
	sited := envelope(letter{source: "sited", reason: dlq.ReasonPanic, topic: "payments", handler: "bill", key: "k8", err: "boom", attempts: 2, at: base.Add(time.Hour),
		site: "ship.(*Courier).Book (courier.go:42)"})
	filters := []archive.Filter{
		{},
		{States: []archive.State{archive.StateOpen}},
		{States: []archive.State{archive.StateReplayed, archive.StateResolved}},
		{States: []archive.State{archive.StateDiscarded}},
		{Topic: "orders"},
		{Topic: "orders", States: []archive.State{archive.StateOpen}},
		{Reason: dlq.ReasonExhausted, Handler: "ship"},
		{ErrorType: "*archivetest.rootCause", States: []archive.State{archive.StateOpen}},
		{ErrorType: "*archivetest.rootCause", ErrorSite: "ship.(*Courier).Book (courier.go:42)"},
		{Topic: "nothing"},
	}
	check := func(step string) {
		t.Helper()
		e.requireStatsAgree(step, filters)
	}
	check("published")
	e.publish(archivekit.CopyMessage(f[0]), other, archivekit.CopyMessage(other), sited)
	check("copies")
	mark := func(m archive.Mark, ids ...string) {
		t.Helper()
		_, err := e.a.Mark(e.ctx, m, ids...)
		require.NoError(t, err)
	}
	mark(archive.Mark{To: archive.StateReplayed, Run: "run-s"}, f[0].UUID, f[1].UUID, f[2].UUID, "missing")
	check("replayed")
	mark(archive.Mark{To: archive.StateReplayed, Run: "run-t"}, f[0].UUID, f[1].UUID)
	check("replayed again")
	mark(archive.Mark{To: archive.StateResolved, Run: "run-s"}, f[1].UUID)
	check("resolved")
	mark(archive.Mark{To: archive.StateDiscarded, Note: "test data"}, f[3].UUID, other.UUID, f[5].UUID)
	check("discarded")
	mark(archive.Mark{To: archive.StateOpen}, f[3].UUID)
	check("reopened")
	_, err := e.a.Delete(e.ctx, f[0].UUID, other.UUID, "missing")
	require.NoError(t, err)
	check("deleted")
	e.publish(archivekit.CopyMessage(other))
	check("published again after delete")
}

// requireStatsAgree checks that Stats of each filter agrees with what List
// returns for it: totals, every breakdown, the oldest and newest times.
func (e *env) requireStatsAgree(step string, filters []archive.Filter) {
	t := e.t
	t.Helper()
	for _, flt := range filters {
		want := archivekit.NewStats()
		for _, en := range e.listAll(flt, 0) {
			want.Total++
			want.ByReason[string(en.Reason)]++
			want.ByTopic[en.OriginalTopic]++
			want.ByHandler[en.Handler]++
			want.ByErrorType[dlqenv.RootErrorType(en.ErrorTypes)]++
			want.ByFailureGroup[[2]string{dlqenv.RootErrorType(en.ErrorTypes), en.ErrorSite}]++
			state := en.State
			if state == "" {
				state = archive.StateOpen
			}
			want.ByState[string(state)]++
			if want.Oldest.IsZero() || en.DeadLetteredAt.Before(want.Oldest) {
				want.Oldest = en.DeadLetteredAt
			}
			if en.DeadLetteredAt.After(want.Newest) {
				want.Newest = en.DeadLetteredAt
			}
		}
		got, err := e.a.Stats(e.ctx, flt)
		require.NoError(t, err)
		require.Equal(t, want.Total, got.Total, "%s: Stats(%+v).Total", step, flt)
		for name, pair := range map[string][2]map[string]int{
			"ByReason": {want.ByReason, got.ByReason}, "ByTopic": {want.ByTopic, got.ByTopic},
			"ByHandler": {want.ByHandler, got.ByHandler}, "ByErrorType": {want.ByErrorType, got.ByErrorType},
			"ByState": {want.ByState, got.ByState},
		} {
			require.Equal(t, len(pair[0]), len(pair[1]), "%s: Stats(%+v).%s = %v, want %v", step, flt, name, pair[1], pair[0])
			for k, n := range pair[0] {
				require.Equal(t, n, pair[1][k], "%s: Stats(%+v).%s[%q]", step, flt, name, k)
			}
		}
		require.Equal(t, want.ByFailureGroup, got.ByFailureGroup, "%s: Stats(%+v).ByFailureGroup", step, flt)
		requireTime(t, want.Oldest, got.Oldest, step+": Oldest")
		requireTime(t, want.Newest, got.Newest, step+": Newest")
	}
}

// testStatsUnderConcurrentWrites runs publishes (new entries and copies),
// marks of every kind and deletes at once: an archive that keeps counts
// apart from its entries must not lose a change between a read and a
// write of another transaction.
func testStatsUnderConcurrentWrites(t *testing.T, e *env) {
	const writers, rounds = 4, 12
	msg := func(w, r int) *message.Message {
		topics := []string{"orders", "payments", "refunds"}
		return envelope(letter{source: fmt.Sprintf("cw-%d-%d", w, r), reason: dlq.ReasonExhausted, topic: topics[(w+r)%3],
			handler: "ship", err: "db timeout", attempts: 3, at: base.Add(time.Duration(w*rounds+r) * time.Second)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds*4)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				m := msg(w, r)
				if err := e.a.Publish("dead", m, archivekit.CopyMessage(m)); err != nil {
					errs <- err
				}
				// Another writer's entry of this round, which may or may
				// not exist yet: marks skip missing IDs.
				other := msg((w+1)%writers, r).UUID
				var err error
				switch r % 4 {
				case 0:
					_, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateReplayed, Run: fmt.Sprintf("run-%d", w)}, other, m.UUID)
				case 1:
					_, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateDiscarded, Note: "test"}, other)
				case 2:
					_, err = e.a.Delete(e.ctx, other)
				case 3:
					_, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateResolved, Run: "run-0"}, other, m.UUID)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	e.requireStatsAgree("after concurrent writes", []archive.Filter{
		{}, {States: []archive.State{archive.StateOpen}}, {States: []archive.State{archive.StateReplayed}},
		{States: []archive.State{archive.StateDiscarded}}, {States: []archive.State{archive.StateResolved}},
		{Topic: "payments"}, {Topic: "refunds", States: []archive.State{archive.StateOpen, archive.StateResolved}},
	})
}

func testDelete(t *testing.T, e *env) {
	f := e.fixtures()
	n, err := e.a.Delete(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "no IDs, nothing deleted")

	n, err = e.a.Delete(e.ctx, f[1].UUID, f[3].UUID, "missing", f[1].UUID)
	require.NoError(t, err)
	require.Equal(t, 2, n, "only existing entries count")
	for _, id := range []string{f[1].UUID, f[3].UUID} {
		_, err := e.a.Get(e.ctx, id)
		require.ErrorIs(t, err, archive.ErrNotFound)
	}
	require.Equal(t, []string{f[0].UUID, f[2].UUID, f[4].UUID, f[5].UUID}, ids(e.listAll(archive.Filter{}, 0)))
	st, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, 4, st.Total)
	require.Zero(t, st.ByHandler["bill"], "deleted entries leave the stats")

	n, err = e.a.Delete(e.ctx, f[1].UUID)
	require.NoError(t, err)
	require.Zero(t, n, "deleting twice")
	// A deleted dead letter that arrives again is archived again.
	e.publish(f[1])
	require.Equal(t, 1, e.get(f[1].UUID).Copies)
}

func testMarkReplayed(t *testing.T, e *env) {
	f := e.fixtures()
	e.markReplayed(f[0].UUID, "run-a")
	e.markReplayed(f[0].UUID, "run-b")
	e.markReplayed(f[0].UUID, "run-a") // marking twice
	require.Equal(t, []string{"run-a", "run-b"}, e.get(f[0].UUID).ReplayedBy, "oldest first, once per run")

	n, err := e.a.Mark(e.ctx, archive.Mark{To: archive.StateReplayed, Run: "run-a"}, "missing")
	require.NoError(t, err)
	require.Zero(t, n, "a missing entry is not counted")

	require.Equal(t, []string{f[1].UUID, f[2].UUID, f[3].UUID, f[4].UUID, f[5].UUID},
		ids(e.listAll(archive.Filter{NotReplayedBy: "run-a"}, 2)))
	require.Len(t, e.listAll(archive.Filter{NotReplayedBy: "run-c"}, 0), 6)
	// A copy arriving later does not forget the marks.
	e.publish(f[0])
	got := e.get(f[0].UUID)
	require.Equal(t, 2, got.Copies)
	require.Equal(t, []string{"run-a", "run-b"}, got.ReplayedBy)
	listed, err := e.a.List(e.ctx, archive.Filter{IDs: []string{f[0].UUID}}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, []string{"run-a", "run-b"}, listed[0].ReplayedBy, "List fills ReplayedBy too")
}

func testReplayRuns(t *testing.T, e *env) {
	_, err := e.a.LoadReplay(e.ctx, "run-missing")
	require.ErrorIs(t, err, archive.ErrNotFound)

	run := archive.ReplayRun{
		ID: "run-1",
		Filter: archive.Filter{
			IDs: []string{"a", "b"}, Reason: dlq.ReasonExhausted, Topic: "orders", Handler: "ship", Key: "k",
			ErrorContains: "timeout", DeadLetteredAfter: base, DeadLetteredBefore: base.Add(time.Hour),
			ReplayID: "run-0", NotReplayedBy: "run-1", ReplayedBy: "run-00",
			States: []archive.State{archive.StateOpen, archive.StateReplayed},
		},
		Target: "orders.retry", NewKey: true, KeyMetadata: "op", Force: true, After: 42, Until: 77,
		Replayed: 3, Refused: 2, Refailed: 1, Resolved: 1, State: archive.RunRunning,
		Started: base, Updated: base.Add(time.Second),
	}
	require.NoError(t, e.a.SaveReplay(e.ctx, run))
	got, err := e.a.LoadReplay(e.ctx, "run-1")
	require.NoError(t, err)
	requireRun(t, run, got)

	run.After, run.Replayed, run.State, run.Updated = 99, 10, archive.RunDone, base.Add(time.Minute)
	require.NoError(t, e.a.SaveReplay(e.ctx, run))
	got, err = e.a.LoadReplay(e.ctx, "run-1")
	require.NoError(t, err)
	requireRun(t, run, got)

	other := archive.ReplayRun{ID: "run-2", State: archive.RunInterrupted}
	require.NoError(t, e.a.SaveReplay(e.ctx, other))
	got, err = e.a.LoadReplay(e.ctx, "run-2")
	require.NoError(t, err)
	requireRun(t, other, got)
	got, err = e.a.LoadReplay(e.ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, got.State, "runs are kept apart")

	err = e.a.SaveReplay(e.ctx, archive.ReplayRun{})
	require.Error(t, err, "a run without ID is refused")
}

func requireRun(t *testing.T, want, got archive.ReplayRun) {
	t.Helper()
	requireTime(t, want.Started, got.Started, "Started")
	requireTime(t, want.Updated, got.Updated, "Updated")
	requireTime(t, want.Filter.DeadLetteredAfter, got.Filter.DeadLetteredAfter, "Filter.DeadLetteredAfter")
	requireTime(t, want.Filter.DeadLetteredBefore, got.Filter.DeadLetteredBefore, "Filter.DeadLetteredBefore")
	want.Started, want.Updated, got.Started, got.Updated = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	want.Filter.DeadLetteredAfter, want.Filter.DeadLetteredBefore = time.Time{}, time.Time{}
	got.Filter.DeadLetteredAfter, got.Filter.DeadLetteredBefore = time.Time{}, time.Time{}
	if len(want.Filter.IDs) == 0 && len(got.Filter.IDs) == 0 {
		want.Filter.IDs, got.Filter.IDs = nil, nil
	}
	if len(want.Filter.States) == 0 && len(got.Filter.States) == 0 {
		want.Filter.States, got.Filter.States = nil, nil
	}
	require.Equal(t, want, got)
}

func testConcurrent(t *testing.T, e *env) {
	const workers, rounds = 8, 10
	shared := envelope(letter{source: "shared", reason: dlq.ReasonExhausted, topic: "orders", at: base, payload: []byte("same")})
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*2)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				// Each publisher has its own copy, as each delivery would.
				if err := e.a.Publish("dead", archivekit.CopyMessage(shared)); err != nil {
					errs <- err
				}
				own := envelope(letter{source: fmt.Sprintf("w%d-r%d", w, r), reason: dlq.ReasonPermanent, at: base})
				if err := e.a.Publish("dead", own); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := e.get(shared.UUID)
	require.Equal(t, workers*rounds, got.Copies, "every copy counted, one entry")
	all := e.listAll(archive.Filter{}, 0)
	require.Len(t, all, 1+workers*rounds)
	seen := map[int64]bool{}
	for i, en := range all {
		require.False(t, seen[en.Seq], "Seq %d reused", en.Seq)
		seen[en.Seq] = true
		if i > 0 {
			require.Greater(t, en.Seq, all[i-1].Seq)
		}
	}
}
