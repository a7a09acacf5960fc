package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/faults"
)

func TestEnvelopeKeepsOriginalBytesAndAddsContext(t *testing.T) {
	t.Parallel()
	payload := []byte{0x00, 0xff, 'p', 'a', 'y', 0x80}
	msg := message.NewMessage("uuid-1", payload)
	msg.Metadata.Set("tenant", "acme")
	msg.Metadata.Set("ce_id", "évènement\t1")
	at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	hist := []idempotency.AttemptRecord{
		{Attempt: 1, Started: at.Add(-3 * time.Minute), Ended: at.Add(-2 * time.Minute), Result: idempotency.ResultFailed, Error: "timeout"},
		{Attempt: 2, Started: at.Add(-time.Minute), Result: idempotency.ResultUnknown},
	}
	fe := dlq.Final(dlq.ReasonExhausted, fmt.Errorf("charge: %w", errors.New("timeout")))
	fe.Attempts, fe.History, fe.OperationKey, fe.Fingerprint = 2, hist, "pay-1", "abc"
	f := dlq.FailureFrom(fe)
	f.At, f.TraceID = at, "0af7651916cd43dd8448eb211c80319c"
	f.Topic, f.Handler = "payments", "charge"

	env := dlq.Wrap(msg, f, nil, "host-1", "billing")
	require.Equal(t, envelope.DeadLetterUUID("uuid-1"), env.UUID)
	require.NotEqual(t, "uuid-1", env.UUID, "a broker deduplicating by id must not drop the dead letter")
	require.Equal(t, env.UUID, dlq.Wrap(msg, f, nil, "", "").UUID, "every copy has the same UUID")
	require.Equal(t, payload, []byte(env.Payload))
	require.Equal(t, "acme", env.Metadata.Get("tenant"))
	require.Equal(t, "évènement\t1", env.Metadata.Get("ce_id"))
	want := map[string]string{
		dlq.KeyVersion: "1", dlq.KeyOriginalUUID: "uuid-1", dlq.KeyReason: "exhausted", dlq.KeyError: "charge: timeout",
		dlq.KeyAttempts: "2", dlq.KeyOriginalTopic: "payments", dlq.KeyHandler: "charge",
		dlq.KeyConsumerGroup: "billing", dlq.KeyOperationKey: "pay-1", dlq.KeyFingerprint: "abc",
		dlq.KeyTraceID: "0af7651916cd43dd8448eb211c80319c", dlq.KeyHost: "host-1",
		dlq.KeyFirstFailureAt: "2026-11-30T06:58:00Z", dlq.KeyLastFailureAt: "2026-11-30T06:59:00Z",
		dlq.KeyDeadLetteredAt: "2026-11-30T07:00:00Z",
	}
	for k, v := range want {
		require.Equal(t, v, env.Metadata.Get(k), k)
	}
	for k := range env.Metadata {
		if _, orig := msg.Metadata[k]; !orig {
			require.True(t, strings.HasPrefix(k, "surely_"), "added key %q is not prefixed", k)
		}
	}
	got, err := envelope.ParseHistory(env.Metadata.Get(dlq.KeyHistory))
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "timeout", got[0].Error)
	require.Equal(t, "uuid-1", msg.UUID, "the source message is not modified")
	require.Len(t, msg.Metadata, 2)
}

func TestEnvelopeWritesOptionalKeysOnlyWhenSet(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("uuid-1", nil)
	f := dlq.Failure{Reason: dlq.ReasonPermanent, Err: errors.New("boom")}

	bare := dlq.Wrap(msg, f, nil, "", "")
	for _, k := range []string{dlq.KeyNamespace, dlq.KeyRetention, dlq.KeyDeadLetterTraceparent, dlq.KeyErrorSite} {
		_, ok := bare.Metadata[k]
		require.False(t, ok, "%s is absent when the failure has no value for it", k)
	}

	f.Namespace, f.Retention = "orders", 90*time.Minute
	f.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	env := dlq.Wrap(msg, f, nil, "", "")
	require.Equal(t, "orders", env.Metadata.Get(dlq.KeyNamespace))
	require.Equal(t, "1h30m0s", env.Metadata.Get(dlq.KeyRetention))
	require.Equal(t, f.Traceparent, env.Metadata.Get(dlq.KeyDeadLetterTraceparent))
}

func TestHistoryIsBounded(t *testing.T) {
	t.Parallel()
	var hist []idempotency.AttemptRecord
	for i := range defaults.MaxHistory {
		hist = append(hist, idempotency.AttemptRecord{Attempt: i + 1, Result: idempotency.ResultFailed,
			Error: strings.Repeat("e", defaults.MaxErrorLen), Stack: strings.Repeat("s", defaults.MaxStackLen)})
	}
	env := dlq.Wrap(message.NewMessage("u", nil), dlq.Failure{Reason: dlq.ReasonPanic, Err: errors.New("boom"), History: hist}, nil, "", "")
	require.LessOrEqual(t, len(env.Metadata.Get(dlq.KeyHistory)), envelope.MaxHistoryBytes)
	got, err := envelope.ParseHistory(env.Metadata.Get(dlq.KeyHistory))
	require.NoError(t, err)
	require.NotEmpty(t, got)
	require.Equal(t, defaults.MaxHistory, got[len(got)-1].Attempt, "the newest attempt is kept")
	require.NotEmpty(t, got[len(got)-1].Stack, "the newest stack is kept")
}

func TestErrorTypes(t *testing.T) {
	t.Parallel()
	base := errors.New("x")
	require.Equal(t, "*errors.errorString", envelope.ErrorTypes(base))
	require.Equal(t, "*fmt.wrapError > *errors.errorString", envelope.ErrorTypes(fmt.Errorf("a: %w", base)))
	require.Equal(t, "*dlq.FinalError > *errors.joinError[*errors.errorString, *fmt.wrapError > *errors.errorString]",
		envelope.ErrorTypes(dlq.Final(dlq.ReasonPermanent, errors.Join(base, fmt.Errorf("b: %w", base)))))
	require.Equal(t, "", envelope.ErrorTypes(nil))
}

func TestRedactorAndPublisher(t *testing.T) {
	t.Parallel()
	pub := faults.NewPublisher(1)
	p, err := dlq.NewPublisher(pub, "dead", dlq.WithRedactor(func(s string) string { return strings.ReplaceAll(s, "s3cret", "[redacted]") }))
	require.NoError(t, err)
	msg := message.NewMessage("u", []byte("p"))
	f := dlq.Failure{Reason: dlq.ReasonPermanent, Err: errors.New("token s3cret refused"),
		History: []idempotency.AttemptRecord{{Attempt: 1, Result: idempotency.ResultFailed, Error: "token s3cret refused"}}}
	require.ErrorIs(t, p.Publish(context.Background(), msg, f), faults.ErrInjected)
	require.NoError(t, p.Publish(context.Background(), msg, f))
	out := pub.Published("dead")
	require.Len(t, out, 1)
	for k, v := range out[0].Metadata {
		require.NotContains(t, v, "s3cret", k)
	}
	require.Equal(t, "token [redacted] refused", out[0].Metadata.Get(dlq.KeyError))

	_, err = dlq.NewPublisher(nil, "dead")
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	_, err = dlq.NewPublisher(pub, "")
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
}

func TestRootErrorType(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                    "",
		"*errors.errorString": "*errors.errorString",
		"*dlq.FinalError > *fmt.wrapError > *net.OpError":       "*net.OpError",
		"*fmt.wrapError > *errors.joinError[*a.B > *a.C, *d.E]": "*errors.joinError[*a.B > *a.C, *d.E]",
	} {
		require.Equal(t, want, envelope.RootErrorType(in), in)
	}
	chain := envelope.ErrorTypes(fmt.Errorf("x: %w", errors.Join(errors.New("a"), errors.New("b"))))
	require.Equal(t, "*errors.joinError[*errors.errorString, *errors.errorString]", envelope.RootErrorType(chain))
}

func TestPublisherOptions(t *testing.T) {
	t.Parallel()
	pub := faults.NewPublisher(0)
	p, err := dlq.NewPublisher(pub, "dead", dlq.WithConsumerGroup("g1"))
	require.NoError(t, err)
	require.Equal(t, "dead", p.Topic())
	require.NoError(t, p.Publish(context.Background(), message.NewMessage("u", nil), dlq.Failure{Reason: dlq.ReasonPermanent}))
	out := pub.Published("dead")
	require.Len(t, out, 1)
	require.Equal(t, "g1", out[0].Metadata.Get(dlq.KeyConsumerGroup))
	host, _ := os.Hostname()
	require.Equal(t, host, out[0].Metadata.Get(dlq.KeyHost))

	for name, o := range map[string]dlq.Option{
		"nil option":     nil,
		"nil redactor":   dlq.WithRedactor(nil),
		"nil logger":     dlq.WithLogger(nil),
		"nil clock":      dlq.WithClock(nil),
		"zero retention": dlq.WithRetention(0),
		// Options of other constructors of the family are refused, not ignored.
		"logger":    dlq.WithLogger(slog.New(slog.DiscardHandler)),
		"clock":     dlq.WithClock(time.Now),
		"retention": dlq.WithRetention(time.Hour),
	} {
		_, err := dlq.NewPublisher(pub, "dead", o)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
	_, err = dlq.NewPublisher(pub, "dead", dlq.WithRetention(time.Hour))
	require.ErrorContains(t, err, "dlq.NewPublisher does not take option WithRetention")
}
