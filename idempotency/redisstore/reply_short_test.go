package redisstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A reply shorter than the field asked for (an older script's reply during
// a rolling upgrade) reads as the field's zero value, also for the first
// index past the end, and is no decoding error.
func TestReplyFieldPastTheEndIsZero(t *testing.T) {
	t.Parallel()
	r := &reply{vals: []any{"DONE", int64(3)}}
	require.Equal(t, "DONE", r.str(0))
	require.Equal(t, int64(3), r.int(1))
	require.Empty(t, r.str(2))
	require.Zero(t, r.int(2))
	require.Empty(t, r.str(5))
	require.NoError(t, r.err)
}
