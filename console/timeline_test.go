package console_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/envelope"
)

// attemptItems returns the timeline's items of page, one per attempt.
func attemptItems(t *testing.T, page string) []string {
	t.Helper()
	_, list, ok := strings.Cut(page, `id="timeline"`)
	if !ok {
		t.Fatal("the page has no timeline")
	}
	list, _, _ = strings.Cut(list, "</ol>")
	items := strings.Split(list, "<li")[1:]
	return items
}

// The entry's timeline names the process that ran each attempt (escaped),
// and nothing for an attempt of a history written without owners.
func TestEntryTimelineShowsTheProcess(t *testing.T) {
	at := t0.Add(-time.Hour)
	msg := message.NewMessage("owners", []byte("{}"))
	env := dlq.Wrap(msg, dlq.Failure{
		Reason: dlq.ReasonExhausted, Err: errors.New("boom"), Attempts: 3, OperationKey: "order-9", At: at,
		History: []idempotency.AttemptRecord{
			{Attempt: 1, Started: at.Add(-3 * time.Second), Ended: at.Add(-2 * time.Second), Result: idempotency.ResultUnknown, Owner: "worker-1/4101"},
			{Attempt: 2, Started: at.Add(-2 * time.Second), Ended: at.Add(-time.Second), Result: idempotency.ResultFailed, Error: "boom", Owner: "worker-2/17 <b>"},
			{Attempt: 3, Started: at.Add(-time.Second), Ended: at, Result: idempotency.ResultFailed, Error: "boom"},
		},
	}, nil, "worker-2", "group")
	ar, err := memarchive.New(dlq.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := ar.Publish("dlq", env); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth())
	_, page := get(t, srv, "/entry?id="+envelope.DeadLetterUUID("owners"))
	items := attemptItems(t, page)
	if len(items) != 3 {
		t.Fatalf("%d attempts in the timeline, want 3:\n%s", len(items), page)
	}
	for i, want := range []string{`process <code>worker-1/4101</code>`, `process <code>worker-2/17 &lt;b&gt;</code>`} {
		if !strings.Contains(items[i], want) {
			t.Errorf("attempt %d lacks %q:\n%s", i+1, want, items[i])
		}
	}
	if strings.Contains(items[2], "process") {
		t.Errorf("an attempt without an owner names a process:\n%s", items[2])
	}
}

// The operation page's timeline, read from the store, names the process
// too.
func TestOperationTimelineShowsTheProcess(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Claim(context.Background(), idempotency.ClaimRequest{Namespace: "ns", Key: "order-5", Lease: time.Minute, MaxAttempts: 3, Owner: "worker-3/99"})
	if err != nil || res.Status != idempotency.Acquired {
		t.Fatalf("claim: %v %v", res.Status, err)
	}
	ar, err := memarchive.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ar, console.WithoutAuth(), replay.WithStore(store))
	_, page := get(t, srv, "/operation?ns=ns&key=order-5")
	if items := attemptItems(t, page); len(items) != 1 || !strings.Contains(items[0], `process <code>worker-3/99</code>`) {
		t.Errorf("the operation's timeline does not name the process:\n%s", page)
	}
}
