package archive_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/internal/archivekit"
)

// flakyArchive fails the first failFirst publishes (or all while down) and
// signals every stored message.
type flakyArchive struct {
	archive.Archive
	mu        sync.Mutex
	failFirst int
	down      bool
	calls     int
	stored    chan string
}

func newFlaky(t *testing.T, failFirst int) *flakyArchive {
	t.Helper()
	a, err := memarchive.New()
	require.NoError(t, err)
	return &flakyArchive{Archive: a, failFirst: failFirst, stored: make(chan string, 64)}
}

var errArchiveDown = errors.New("archive down")

func (f *flakyArchive) Publish(topic string, msgs ...*message.Message) error {
	f.mu.Lock()
	f.calls++
	fail := f.down || f.calls <= f.failFirst
	f.mu.Unlock()
	if fail {
		return errArchiveDown
	}
	if err := f.Archive.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		f.stored <- m.UUID
	}
	return nil
}

func (f *flakyArchive) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func waitStored(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("nothing reached the archive")
		return ""
	}
}

// runIngest starts Ingest and returns a func that stops it and returns its error.
func runIngest(t *testing.T, sub message.Subscriber, a archive.Archive, opts ...dlq.Option) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- archive.Ingest(ctx, sub, "dead", a, opts...) }()
	stopped := false
	var err error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestIngestArchivesEveryMessageAndAcksAfterStoring(t *testing.T) {
	t.Parallel()
	// Persistent: the messages wait for Ingest's subscription.
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	ar := newFlaky(t, 0)
	stop := runIngest(t, pubSub, ar)

	src := message.NewMessage("src-1", []byte{0xff, 0x00, 'x'})
	src.Metadata.Set("tenant", "acme")
	env := dlq.Wrap(src, dlq.Failure{Reason: dlq.ReasonExhausted, Err: errors.New("boom"), Attempts: 3, Topic: "orders", Handler: "ship"}, nil, "h", "g")
	plain := message.NewMessage("plain-1", []byte("not an envelope"))
	noID := message.NewMessage("", []byte("raw broker bytes"))
	noID.Metadata.Set("k", "v")

	for _, m := range []*message.Message{env, plain, noID, archivekit.CopyMessage(env)} {
		require.NoError(t, pubSub.Publish("dead", m))
	}
	for range 4 {
		waitStored(t, ar.stored)
	}
	require.NoError(t, stop())

	ctx := t.Context()
	got, err := ar.Get(ctx, env.UUID)
	require.NoError(t, err)
	require.Equal(t, dlq.ReasonExhausted, got.Reason)
	require.Equal(t, "orders", got.OriginalTopic)
	require.Equal(t, []byte(env.Payload), []byte(got.Message.Payload))
	require.Equal(t, 2, got.Copies, "the redelivered copy is counted, not duplicated")

	p, err := ar.Get(ctx, "plain-1")
	require.NoError(t, err)
	require.Empty(t, p.Reason)

	all, err := ar.List(ctx, archive.Filter{}, archive.Page{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	var derived archive.Entry
	for _, e := range all {
		if e.ID != env.UUID && e.ID != "plain-1" {
			derived = e
		}
	}
	require.NotEmpty(t, derived.ID, "a message without UUID gets one")
	require.Equal(t, "raw broker bytes", string(derived.Message.Payload))
	require.Equal(t, "v", derived.Message.Metadata.Get("k"))

	// The same content again lands on the same entry.
	again := message.NewMessage("", []byte("raw broker bytes"))
	again.Metadata.Set("k", "v")
	other := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = other.Close() })
	runIngest(t, other, ar)
	require.NoError(t, other.Publish("dead", again))
	require.Equal(t, derived.ID, waitStored(t, ar.stored))
	d, err := ar.Get(ctx, derived.ID)
	require.NoError(t, err)
	require.Equal(t, 2, d.Copies)
}

func TestIngestNacksWhileTheArchiveFails(t *testing.T) {
	t.Parallel()
	// Persistent: the message waits for Ingest's subscription.
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	ar := newFlaky(t, 3)
	runIngest(t, pubSub, ar, archive.WithRetryDelay(time.Millisecond))

	m := message.NewMessage("m-1", []byte("keep me"))
	require.NoError(t, pubSub.Publish("dead", m))
	require.Equal(t, "m-1", waitStored(t, ar.stored))
	require.Equal(t, 4, ar.Calls(), "three failures nacked and redelivered, the fourth stored")
	got, err := ar.Get(t.Context(), "m-1")
	require.NoError(t, err)
	require.Equal(t, 1, got.Copies)
	require.Equal(t, "keep me", string(got.Message.Payload))
}

func TestIngestStoppedDuringAnOutageLosesNothing(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	ar := newFlaky(t, 0)
	ar.down = true
	stop := runIngest(t, pubSub, ar, archive.WithRetryDelay(time.Millisecond))
	require.NoError(t, pubSub.Publish("dead", message.NewMessage("m-1", []byte("p"))))
	for ar.Calls() < 3 {
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, stop(), "a stop is not an error")
	_, err := ar.Get(t.Context(), "m-1")
	require.ErrorIs(t, err, archive.ErrNotFound)

	// The broker kept the message: the next run archives it.
	ar.mu.Lock()
	ar.down = false
	ar.mu.Unlock()
	runIngest(t, pubSub, ar)
	require.Equal(t, "m-1", waitStored(t, ar.stored))
}

func TestIngestOptions(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	a := newFlaky(t, 0)
	ctx := t.Context()
	require.ErrorIs(t, archive.Ingest(ctx, nil, "dead", a), dlq.ErrInvalidOption)
	require.ErrorIs(t, archive.Ingest(ctx, pubSub, "", a), dlq.ErrInvalidOption)
	require.ErrorIs(t, archive.Ingest(ctx, pubSub, "dead", nil), dlq.ErrInvalidOption)
	require.ErrorIs(t, archive.Ingest(ctx, pubSub, "dead", a, archive.WithRetryDelay(-time.Second)), dlq.ErrInvalidOption)
	require.ErrorIs(t, archive.Ingest(ctx, pubSub, "dead", a, dlq.WithLogger(nil)), dlq.ErrInvalidOption)
	// An option of another constructor of the family is refused, before
	// anything is subscribed.
	err := archive.Ingest(ctx, pubSub, "dead", a, archive.WithMetricsInterval(time.Minute))
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	require.ErrorContains(t, err, "archive.Ingest does not take option archive.WithMetricsInterval")
}
