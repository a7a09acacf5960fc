package integration_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/testbroker"
)

// syncBuffer is a bytes.Buffer safe for the logger's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Without delivery.WithLogger, an adapter's warnings reach slog.Default():
// the one about a message left unsettled at Close does. Not parallel: it
// replaces slog.Default() (the parallel tests of the package run after it).
func TestWarningsGoToDefaultLoggerWithoutOne(t *testing.T) {
	var buf syncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	url := testbroker.EmbeddedNATS(t)
	e := setup(t, url)
	sub, err := surelynats.NewSubscriber(url, e.consumer, delivery.WithCloseTimeout(100*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, e.pub.Publish(e.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	msgs, err := sub.Subscribe(t.Context(), e.topic)
	require.NoError(t, err)
	receive(t, msgs) // and never settled
	require.NoError(t, sub.Close())
	require.Contains(t, buf.String(), "messages still in flight at close")
}
