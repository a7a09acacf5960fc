package handler_test

import (
	"bytes"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/retry"
)

// TestDedupWarningsGoToSlogDefault: without WithLogger, a warning that a
// guarantee is weaker than expected (here: a handler that outlived the
// longest lease hold) goes to slog.Default(); a routine delivery logs
// nothing there at info or above. Not parallel: it swaps slog.Default.
func TestDedupWarningsGoToSlogDefault(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, 0)
		ok := e.chain(t, func(*message.Message) ([]*message.Message, error) { return nil, nil })
		_, err := ok(delivery("fine-1", "x"))
		require.NoError(t, err)
		require.Empty(t, buf.String(), "a routine delivery logs nothing at info or above")

		hung := e.chain(t, func(m *message.Message) ([]*message.Message, error) {
			<-m.Context().Done()
			return nil, m.Context().Err()
		}, handler.WithLease(3*time.Second), handler.WithPolicy(mustPolicy(t, retry.WithMaxInProcessTime(time.Second))))
		_, err = hung(delivery("slow-1", "x"))
		require.Error(t, err)
		require.Contains(t, buf.String(), "handler exceeded the longest lease hold")
		require.Contains(t, buf.String(), "level=WARN")
	})
}
