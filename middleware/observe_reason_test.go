package middleware_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// The outcome log line names the dead-letter reason when there is one, and
// carries no reason attribute otherwise.
func TestObserveLogsReasonOnlyWhenSet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fn   message.HandlerFunc
		want string
		not  string
	}{
		{"dead-lettered", failWith(retry.Permanent(errors.New("boom"))), "reason=permanent", ""},
		{"processed", func(*message.Message) ([]*message.Message, error) { return nil, nil }, "outcome=processed", "reason="},
	} {
		var logs bytes.Buffer
		obs, err := middleware.Observe(middleware.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		require.NoError(t, err)
		h, _ := deadLetterStep(t, 0, c.fn)
		_, _ = obs(h)(message.NewMessage("u-1", []byte(`{}`)))
		require.Contains(t, logs.String(), c.want, c.name)
		if c.not != "" {
			require.NotContains(t, logs.String(), c.not, c.name)
		}
	}
}
