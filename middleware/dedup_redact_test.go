package middleware_test

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/middleware"
)

// The released attempt's error goes through the history redactor when one
// is set, and is stored as it is otherwise.
func TestDedupReleaseRedactsHistory(t *testing.T) {
	t.Parallel()
	fail := func(*message.Message) ([]*message.Message, error) { return nil, errors.New("card 4111 declined") }
	for _, c := range []struct {
		name string
		opts []middleware.Option
		want string
	}{
		{"redactor", []middleware.Option{middleware.WithHistoryRedactor(func(string) string { return "card [redacted] declined" })}, "card [redacted] declined"},
		{"none", nil, "card 4111 declined"},
	} {
		store := leaseStore(t)
		_, err := leaseDedup(t, store, fail, c.opts...)(leaseMsg("u-1", "k-1", `{}`))
		require.Error(t, err)
		rec, err := store.Get(t.Context(), leaseNS, "k-1")
		require.NoError(t, err)
		require.Len(t, rec.History, 1)
		require.Equal(t, c.want, rec.History[0].Error, c.name)
	}
}
