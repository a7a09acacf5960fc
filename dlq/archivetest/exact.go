package archivetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// kafkaMaxTopic is the longest topic name Kafka accepts (249 characters).
const kafkaMaxTopic = 249

// testLongValues: any value a broker accepts is archived, listed, filtered
// and counted. A Kafka topic may have 249 characters, a handler's name and
// an operation key (512 bytes, the stores' limit) are the application's.
func testLongValues(t *testing.T, e *env) {
	topic := "orders." + strings.Repeat("eu-west_1.", 20)
	topic += strings.Repeat("x", kafkaMaxTopic-len(topic))
	require.Len(t, topic, kafkaMaxTopic)
	handler := "ship-" + strings.Repeat("é", kafkaMaxTopic-5) // 249 characters, 493 bytes
	key := strings.Repeat("k", 512)
	site := "warehouse.(*Client).Ship (" + strings.Repeat("d/", 100) + "client.go:42)"
	long := envelope(letter{source: "long-1", reason: dlq.ReasonExhausted, topic: topic, handler: handler, key: key,
		err: strings.Repeat("timeout; ", 200), attempts: 3, at: base, payload: []byte("p"), site: site})
	short := envelope(letter{source: "long-2", reason: dlq.ReasonExhausted, topic: topic[:kafkaMaxTopic-1], handler: handler[:len(handler)-2],
		key: "k", err: "x", attempts: 1, at: base.Add(1), payload: []byte("q")})
	e.publish(long, short)

	got := e.get(long.UUID)
	requireSameMessage(t, long, got.Message)
	require.Equal(t, topic, got.OriginalTopic)
	require.Equal(t, handler, got.Handler)
	require.Equal(t, key, got.OperationKey)
	require.Equal(t, site, got.ErrorSite)

	filters := []archive.Filter{
		{}, {Topic: topic}, {Handler: handler}, {Key: key}, {Topic: topic, Handler: handler},
		{Topic: topic, States: []archive.State{archive.StateOpen}}, {Topic: topic[:kafkaMaxTopic-1]},
		{ErrorType: "*archivetest.rootCause", ErrorSite: site}, {Search: key[:300]},
	}
	for _, f := range filters[1:4] {
		require.Equal(t, []string{long.UUID}, ids(e.listAll(f, 0)), "List(%+v)", f)
	}
	e.requireStatsAgree("published", filters)
	st, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{topic: 1, topic[:kafkaMaxTopic-1]: 1}, st.ByTopic)

	_, err = e.a.Mark(e.ctx, archive.Mark{To: archive.StateDiscarded, Note: strings.Repeat("é", 1000)}, long.UUID)
	require.NoError(t, err)
	e.requireStatsAgree("discarded", filters)
	n, err := e.a.Delete(e.ctx, long.UUID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	e.requireStatsAgree("deleted", filters)
}

// testTrailingSpaces: values that differ only by trailing spaces are
// different values (the root error type excepted: RootErrorType trims it) (byte for byte, as Filter.Match compares them), in
// List, Get, Stats and the counts behind it, and Stats agrees with List
// after every delete.
func testTrailingSpaces(t *testing.T, e *env) {
	exhausted := string(dlq.ReasonExhausted)
	var msgs []*message.Message
	for i, pad := range []string{"", " ", "  "} {
		m := envelope(letter{source: fmt.Sprintf("pad-%d", i), reason: dlq.Reason(exhausted + pad), topic: "orders" + pad,
			handler: "ship" + pad, key: "k1" + pad, err: "refused" + pad, attempts: 1, at: base.Add(-time.Duration(i)), payload: []byte{byte(i)},
			site: "s.go:1" + pad})
		msgs = append(msgs, m)
	}
	// Messages that are not envelopes, whose IDs differ by a space.
	plain := []*message.Message{message.NewMessage("plain-1", []byte("a")), message.NewMessage("plain-1 ", []byte("b"))}
	e.publish(append(msgs, plain...)...)
	for _, m := range append(msgs, plain...) {
		got := e.get(m.UUID)
		require.Equal(t, m.UUID, got.ID)
		require.Equal(t, 1, got.Copies, "%q is not a copy of another entry", m.UUID)
		requireSameMessage(t, m, got.Message)
	}
	require.Len(t, e.listAll(archive.Filter{}, 0), 5)

	var filters []archive.Filter
	for i, pad := range []string{"", " ", "  "} {
		one := []archive.Filter{
			{Reason: dlq.Reason(exhausted + pad)}, {Topic: "orders" + pad}, {Handler: "ship" + pad}, {Key: "k1" + pad},
			{ErrorType: "*archivetest.rootCause", ErrorSite: "s.go:1" + pad},
			{Topic: "orders" + pad, States: []archive.State{archive.StateOpen}},
		}
		for _, f := range one {
			got := e.listAll(f, 0)
			require.Equal(t, []string{msgs[i].UUID}, ids(got), "List(%+v)", f)
			require.True(t, f.Match(got[0]), "Filter.Match refuses what List(%+v) returned", f)
		}
		filters = append(filters, one...)
	}
	// Search is a substring of the key or the error, byte for byte.
	require.Len(t, e.listAll(archive.Filter{Search: "k1"}, 0), 3)
	require.Equal(t, []string{msgs[1].UUID, msgs[2].UUID}, ids(e.listAll(archive.Filter{Search: "k1 "}, 0)))
	require.Equal(t, []string{msgs[2].UUID}, ids(e.listAll(archive.Filter{ErrorContains: "refused  "}, 0)))
	filters = append(filters, archive.Filter{}, archive.Filter{IDs: []string{"plain-1"}}, archive.Filter{Search: "k1 "})
	e.requireStatsAgree("published", filters)
	st, err := e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orders": 1, "orders ": 1, "orders  ": 1, "": 2}, st.ByTopic)

	// Replay runs and marks by run IDs that differ by a space.
	for _, run := range []string{"run-1", "run-1 "} {
		require.NoError(t, e.a.SaveReplay(e.ctx, archive.ReplayRun{ID: run, Target: "to " + run}))
	}
	for _, run := range []string{"run-1", "run-1 "} {
		got, err := e.a.LoadReplay(e.ctx, run)
		require.NoError(t, err)
		require.Equal(t, "to "+run, got.Target)
	}
	e.markReplayed(msgs[0].UUID, "run-1")
	e.markReplayed(msgs[1].UUID, "run-1 ")
	require.Equal(t, []string{"run-1"}, e.get(msgs[0].UUID).ReplayedBy)
	require.Equal(t, []string{msgs[1].UUID}, ids(e.listAll(archive.Filter{ReplayedBy: "run-1 "}, 0)))
	e.requireStatsAgree("replayed", filters)

	// Delete one at a time: Stats (the counts) follows List every time.
	for _, m := range append(plain, msgs...) {
		n, err := e.a.Delete(e.ctx, m.UUID)
		require.NoError(t, err)
		require.Equal(t, 1, n, "Delete(%q)", m.UUID)
		e.requireStatsAgree("deleted "+m.UUID, filters)
	}
	st, err = e.a.Stats(e.ctx, archive.Filter{})
	require.NoError(t, err)
	require.Zero(t, st.Total, "Stats after deleting every entry: %+v", st)
}
