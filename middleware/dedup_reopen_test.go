package middleware_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/middleware"
)

// A replayed message (surely_replay_id set) reopens an EXHAUSTED record
// once per replay run; a malformed run ID is ignored and logged.
func TestDedupReopensOncePerReplayRun(t *testing.T) {
	t.Parallel()
	store, err := memstore.New()
	require.NoError(t, err)
	var logs bytes.Buffer
	dedup, err := middleware.Dedup(store, "reopen", middleware.WithMaxAttempts(1),
		middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	runs := 0
	failing := errors.New("downstream down")
	h := dedup(func(*message.Message) ([]*message.Message, error) {
		runs++
		return nil, failing
	})
	deliver := func(replayID string) error {
		msg := message.NewMessage("uuid-1", []byte(`{"n":1}`))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, "op-1")
		if replayID != "" {
			msg.Metadata.Set(dlq.KeyReplayID, replayID)
		}
		_, err := h(msg)
		return err
	}

	require.ErrorIs(t, deliver(""), failing)
	require.Equal(t, 1, runs)
	_, final := dlq.AsFinal(deliver(""))
	require.True(t, final, "budget spent: exhausted")
	require.Equal(t, 1, runs)

	require.ErrorIs(t, deliver("run-1"), failing, "the replay gets a fresh budget")
	require.Equal(t, 2, runs)
	_, final = dlq.AsFinal(deliver("run-1"))
	require.True(t, final, "a redelivered copy of the same run does not reopen again")
	require.Equal(t, 2, runs)

	_, final = dlq.AsFinal(deliver("bad\nid"))
	require.True(t, final, "an invalid run ID is ignored")
	require.Equal(t, 2, runs)
	require.Contains(t, logs.String(), "invalid replay ID")
	_, final = dlq.AsFinal(deliver(strings.Repeat("r", defaults.MaxKeyLen+1)))
	require.True(t, final, "an overlong run ID is ignored")

	rec, err := store.Get(t.Context(), "reopen", "op-1")
	require.NoError(t, err)
	require.Equal(t, "run-1", rec.ReopenedBy)
	require.Equal(t, 2, rec.Attempts)
}
