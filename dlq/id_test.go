package dlq_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/envelope"
)

// A replayed message that fails again is a new dead letter (its ID carries
// the run), the same one for every copy within the run.
func TestDeadLetterIDOfAReplayedMessage(t *testing.T) {
	orig := message.NewMessage("5b1c8e52-7c55-4b1e-8f4e-0e4f3b0a9d11", []byte("pay"))
	first := envelope.DeadLetterID(orig.UUID, orig.Metadata.Get(dlq.KeyReplayID))
	require.Equal(t, envelope.DeadLetterUUID(orig.UUID), first)

	replayed := message.NewMessage(orig.UUID, orig.Payload)
	replayed.Metadata.Set(dlq.KeyReplayID, "run-1")
	again := envelope.DeadLetterID(replayed.UUID, replayed.Metadata.Get(dlq.KeyReplayID))
	require.NotEqual(t, first, again, "a re-failure must not be a copy of the entry it replays")
	require.Equal(t, again, envelope.DeadLetterID(replayed.UUID, replayed.Metadata.Get(dlq.KeyReplayID)), "stable within one run")

	other := message.NewMessage(orig.UUID, orig.Payload)
	other.Metadata.Set(dlq.KeyReplayID, "run-2")
	require.NotEqual(t, again, envelope.DeadLetterID(other.UUID, other.Metadata.Get(dlq.KeyReplayID)))

	env := dlq.Wrap(replayed, dlq.Failure{Reason: dlq.ReasonExhausted}, nil, "", "")
	require.Equal(t, again, env.UUID)
	require.Equal(t, orig.UUID, env.Metadata.Get(dlq.KeyOriginalUUID))
}
