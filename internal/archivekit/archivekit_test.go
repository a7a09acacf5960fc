package archivekit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/archivekit"
)

func TestEntry(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	archived := at.Add(time.Hour)
	src := message.NewMessage("src", []byte{0xff})
	env := dlq.Wrap(src, dlq.Failure{Reason: dlq.ReasonExhausted, Err: errors.New("boom"), Attempts: 4,
		Topic: "orders", Handler: "ship", Namespace: "ns", OperationKey: "k", At: at}, nil, "", "g")
	e := archivekit.Entry(env, archived)
	require.Equal(t, env.UUID, e.ID)
	require.Equal(t, dlq.ReasonExhausted, e.Reason)
	require.Equal(t, 4, e.Attempts)
	require.True(t, at.Equal(e.DeadLetteredAt))
	require.True(t, archived.Equal(e.ArchivedAt))
	env.Payload[0] = 0 // the entry holds a copy
	require.Equal(t, byte(0xff), e.Message.Payload[0])

	bad := message.NewMessage("bad", nil)
	bad.Metadata.Set(dlq.KeyAttempts, "many")
	bad.Metadata.Set(dlq.KeyDeadLetteredAt, "yesterday")
	e = archivekit.Entry(bad, archived)
	require.Zero(t, e.Attempts, "an unparsable key leaves its field zero")
	require.True(t, archived.Equal(e.DeadLetteredAt), "an unparsable time falls back to ArchivedAt")
}

func TestAddStatsOnZeroValue(t *testing.T) {
	t.Parallel()
	var s archive.Stats
	archivekit.AddStats(&s, archive.Entry{Reason: dlq.ReasonPanic, DeadLetteredAt: time.Unix(10, 0)})
	archivekit.AddStats(&s, archive.Entry{Reason: dlq.ReasonPanic, DeadLetteredAt: time.Unix(5, 0)})
	require.Equal(t, 2, s.Total)
	require.Equal(t, 2, s.ByReason["panic"])
	require.Equal(t, 2, s.ByTopic[""])
	require.Equal(t, time.Unix(5, 0), s.Oldest)
	require.Equal(t, time.Unix(10, 0), s.Newest)
}

func TestPageLimit(t *testing.T) {
	t.Parallel()
	require.Equal(t, archivekit.DefaultPageSize, archivekit.PageLimit(archive.Page{}))
	require.Equal(t, archivekit.DefaultPageSize, archivekit.PageLimit(archive.Page{Limit: -3}))
	require.Equal(t, 7, archivekit.PageLimit(archive.Page{Limit: 7}))
}
