package dlq_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
)

// ParseEnvelope reads back every field Wrap wrote.
func TestParseEnvelopeReadsWhatWrapWrote(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	hist := []idempotency.AttemptRecord{
		{Attempt: 1, Started: at.Add(-3 * time.Minute), Ended: at.Add(-2 * time.Minute), Result: idempotency.ResultFailed, Error: "timeout"},
		{Attempt: 2, Started: at.Add(-time.Minute), Ended: at.Add(-time.Second), Result: idempotency.ResultFailed, Error: "refused"},
	}
	src := message.NewMessage("uuid-1", []byte("pay"))
	src.Metadata.Set(dlq.KeyReplayOf, "entry-7")
	src.Metadata.Set(dlq.KeyReplayID, "run-3")
	f := dlq.Failure{
		Reason: dlq.ReasonExhausted, Err: errors.New("refused"), Attempts: 2, History: hist,
		OperationKey: "pay-1", Fingerprint: "abc", Topic: "payments", Handler: "charge",
		Namespace: "billing", Retention: 72 * time.Hour, TraceID: "0af7651916cd43dd8448eb211c80319c",
		SpanID: "b7ad6b7169203331", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", At: at,
	}
	got, err := dlq.ParseEnvelope(dlq.Wrap(src, f, nil, "host-1", "group-1"))
	require.NoError(t, err)
	require.Equal(t, dlq.Envelope{
		Version: "1", Reason: dlq.ReasonExhausted, Error: "refused", ErrorTypes: "*errors.errorString",
		Attempts: 2, FirstFailureAt: at.Add(-2 * time.Minute), LastFailureAt: at.Add(-time.Second), DeadLetteredAt: at,
		History: got.History, OriginalTopic: "payments", Handler: "charge", ConsumerGroup: "group-1", OriginalUUID: "uuid-1",
		OperationKey: "pay-1", Fingerprint: "abc", Namespace: "billing", Retention: 72 * time.Hour,
		TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331",
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Host: "host-1",
		ReplayOf: "entry-7", ReplayID: "run-3",
	}, got)
	require.Len(t, got.History, 2)
	for i, h := range got.History {
		require.Equal(t, hist[i].Attempt, h.Attempt)
		require.Equal(t, hist[i].Error, h.Error)
		require.True(t, hist[i].Started.Equal(h.Started))
	}
}

// A message that is not a dead letter is refused; a field that does not
// parse is reported, by its key, and left zero, while the others are read.
func TestParseEnvelopeReportsWhatItCannotRead(t *testing.T) {
	t.Parallel()
	_, err := dlq.ParseEnvelope(message.NewMessage("m", nil))
	require.ErrorContains(t, err, "not a dead letter")

	msg := message.NewMessage("m", nil)
	msg.Metadata.Set(dlq.KeyVersion, "1")
	msg.Metadata.Set(dlq.KeyReason, "permanent")
	msg.Metadata.Set(dlq.KeyAttempts, "three")
	msg.Metadata.Set(dlq.KeyDeadLetteredAt, "yesterday")
	msg.Metadata.Set(dlq.KeyRetention, "72h")
	msg.Metadata.Set(dlq.KeyHistory, "[{")
	got, err := dlq.ParseEnvelope(msg)
	require.ErrorContains(t, err, dlq.KeyAttempts)
	require.ErrorContains(t, err, dlq.KeyDeadLetteredAt)
	require.ErrorContains(t, err, dlq.KeyHistory)
	require.NotContains(t, err.Error(), dlq.KeyRetention)
	require.Equal(t, dlq.ReasonPermanent, got.Reason)
	require.Zero(t, got.Attempts)
	require.True(t, got.DeadLetteredAt.IsZero())
	require.Equal(t, 72*time.Hour, got.Retention)
	require.Nil(t, got.History)
}

// The process that ran each attempt (AttemptRecord.Owner) travels in the
// envelope's history, in the order of the attempts; a history written
// before owners were kept reads with none.
func TestEnvelopeHistoryKeepsOwners(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	hist := []idempotency.AttemptRecord{
		{Attempt: 1, Started: at.Add(-3 * time.Minute), Ended: at.Add(-2 * time.Minute), Result: idempotency.ResultUnknown, Owner: "worker-1/4242"},
		{Attempt: 2, Started: at.Add(-time.Minute), Ended: at.Add(-time.Second), Result: idempotency.ResultFailed, Error: "refused", Owner: "worker-2/17"},
		{Attempt: 3, Started: at.Add(-time.Second), Ended: at, Result: idempotency.ResultFailed, Error: "refused"},
	}
	env := dlq.Wrap(message.NewMessage("u", []byte("p")), dlq.Failure{Reason: dlq.ReasonExhausted, History: hist, At: at}, nil, "host-1", "")
	got, err := dlq.ParseEnvelope(env)
	require.NoError(t, err)
	owners := make([]string, len(got.History))
	for i, h := range got.History {
		owners[i] = h.Owner
	}
	require.Equal(t, []string{"worker-1/4242", "worker-2/17", ""}, owners)
	require.Contains(t, env.Metadata.Get(dlq.KeyHistory), `"owner":"worker-2/17"`)
	require.NotContains(t, env.Metadata.Get(dlq.KeyHistory), `"owner":""`, "no owner, no member")

	old := message.Metadata{dlq.KeyHistory: `[{"attempt":1,"started":"2026-11-30T06:57:00Z","result":"failed","error":"x","trace_id":"0af7651916cd43dd8448eb211c80319c"}]`}
	h, err := envelope.ParseHistory(old.Get(dlq.KeyHistory))
	require.NoError(t, err)
	require.Len(t, h, 1)
	require.Empty(t, h[0].Owner)
	require.Equal(t, "x", h[0].Error)
}
