package replay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/archivekit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeClock is a Clock whose Sleep moves it forward at once.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// published is one message a recorder saw.
type published struct {
	topic string
	msg   *message.Message
	at    time.Time
}

// recorder is a publisher that records every message, with the time of
// its clock, and calls hook (if any) after recording.
type recorder struct {
	clock interface{ Now() time.Time }
	hook  func(p published) error

	mu   sync.Mutex
	msgs []published
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p := published{topic: topic, msg: archivekit.CopyMessage(m), at: r.clock.Now()}
		if r.hook != nil {
			if err := r.hook(p); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, p)
		r.mu.Unlock()
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) all() []published {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]published(nil), r.msgs...)
}

// countByReplayOf counts the published messages per archived entry.
func (r *recorder) countByReplayOf() map[string]int {
	out := map[string]int{}
	for _, p := range r.all() {
		out[p.msg.Metadata.Get(dlq.KeyReplayOf)]++
	}
	return out
}

// source is an original message of the tests: UUID src-<i>, key op-<i>.
func source(i int) *message.Message {
	m := message.NewMessage(fmt.Sprintf("src-%d", i), fmt.Appendf(nil, `{"order":%d}`, i))
	m.Metadata.Set(idempotency.DefaultMetadataKey, fmt.Sprintf("op-%d", i))
	m.Metadata.Set("tenant", "acme")
	return m
}

// entrySpec says how deadLetters() dead-letters a source message.
type entrySpec struct {
	topic     string
	at        time.Time     // dead-lettered at
	retention time.Duration // 0: no surely_dedup_retention in the envelope
	reason    dlq.Reason    // "": dlq.ReasonExhausted
}

// deadLetters dead-letters n source messages (source(first) ...) into a and
// returns the entry IDs in Seq order.
func deadLetters(t *testing.T, a archive.Archive, first, n int, spec entrySpec) []string {
	t.Helper()
	if spec.topic == "" {
		spec.topic = "orders"
	}
	if spec.at.IsZero() {
		spec.at = t0.Add(-time.Minute)
	}
	if spec.reason == "" {
		spec.reason = dlq.ReasonExhausted
	}
	ids := make([]string, 0, n)
	for i := first; i < first+n; i++ {
		src := source(i)
		env := dlq.Wrap(src, dlq.Failure{
			Reason: spec.reason, Err: errors.New("warehouse down"), Attempts: 5,
			OperationKey: src.Metadata.Get(idempotency.DefaultMetadataKey), Fingerprint: "fp",
			Topic: spec.topic, Handler: "reserve", Namespace: "reserve", Retention: spec.retention,
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
			Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", At: spec.at,
		}, nil, "host-1", "group-1")
		require.NoError(t, a.Publish("dead-letters", env))
		ids = append(ids, env.UUID)
	}
	return ids
}

// newArchive returns an empty in-memory archive on clock c.
func newArchive(t *testing.T, c *fakeClock) archive.Archive {
	t.Helper()
	a, err := memarchive.New(dlq.WithClock(c.Now))
	require.NoError(t, err)
	return a
}

// on returns the options that run a replay on the fake clock c (its time,
// and its sleep that moves it forward), followed by more.
func on(c *fakeClock, more ...dlq.Option) []dlq.Option {
	return append([]dlq.Option{dlq.WithClock(c.Now), replay.WithSleep(c.Sleep)}, more...)
}
