package middleware_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// The dead-letter step on its own: which handler errors it dead-letters
// (final or permanent, but never a store outage marked permanent), what it
// returns in each case, and what the envelope says.

const classifyTopic = "classify-dead"

func deadLetterStep(t *testing.T, failPublishes int, fn message.HandlerFunc) (message.HandlerFunc, *faults.Publisher) {
	t.Helper()
	sink := faults.NewPublisher(failPublishes)
	pub, err := dlq.NewPublisher(sink, classifyTopic)
	require.NoError(t, err)
	mw, err := middleware.DeadLetter(pub)
	require.NoError(t, err)
	return mw(fn), sink
}

func failWith(err error) message.HandlerFunc {
	return func(*message.Message) ([]*message.Message, error) { return nil, err }
}

func TestDeadLetterRejectsNilPublisher(t *testing.T) {
	t.Parallel()
	_, err := middleware.DeadLetter(nil)
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
}

func TestDeadLetterClassification(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	outage := fmt.Errorf("%w: claim: %w", middleware.ErrStoreUnavailable, boom)
	cases := []struct {
		name   string
		err    error
		dead   bool
		reason dlq.Reason
	}{
		{"transient", boom, false, ""},
		{"retry after", retry.After(time.Second, boom), false, ""},
		{"permanent", retry.Permanent(boom), true, dlq.ReasonPermanent},
		{"wrapped permanent", fmt.Errorf("charge: %w", retry.Permanent(boom)), true, dlq.ReasonPermanent},
		{"store outage marked permanent", retry.Permanent(outage), false, ""},
		{"final", dlq.Final(dlq.ReasonConflict, boom), true, dlq.ReasonConflict},
		{"final over a store outage", dlq.Final(dlq.ReasonExhausted, outage), true, dlq.ReasonExhausted},
	}
	for _, c := range cases {
		h, sink := deadLetterStep(t, 0, failWith(c.err))
		msgs, err := h(message.NewMessage("m-1", []byte("{}")))
		assert.Nil(t, msgs, c.name)
		published := sink.Published(classifyTopic)
		if !c.dead {
			assert.Same(t, c.err, err, "%s: the error goes back unchanged", c.name)
			assert.Empty(t, published, c.name)
			continue
		}
		assert.NoError(t, err, "%s: a dead-lettered message is acked", c.name)
		if assert.Len(t, published, 1, c.name) {
			assert.Equal(t, string(c.reason), published[0].Metadata.Get(dlq.KeyReason), c.name)
		}
	}
}

func TestDeadLetterPassesSuccess(t *testing.T) {
	t.Parallel()
	out := message.NewMessage("out-1", []byte("x"))
	h, sink := deadLetterStep(t, 0, func(*message.Message) ([]*message.Message, error) {
		return []*message.Message{out}, nil
	})
	msgs, err := h(message.NewMessage("m-1", []byte("{}")))
	require.NoError(t, err)
	require.Equal(t, []*message.Message{out}, msgs)
	require.Empty(t, sink.Published(classifyTopic))
}

// A failed dead-letter publish keeps both errors and acks nothing; without
// a broker control to nack with a delay, the step waits the retry wait
// itself (in a synctest bubble here).
func TestDeadLetterPublishFailureKeepsBothErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cause := retry.Permanent(errors.New("bad order"))
		h, sink := deadLetterStep(t, 1, failWith(cause))
		start := time.Now()
		msgs, err := h(message.NewMessage("m-1", []byte("{}")))
		require.Nil(t, msgs)
		require.ErrorIs(t, err, faults.ErrInjected)
		require.ErrorIs(t, err, cause)
		require.Empty(t, sink.Published(classifyTopic))
		require.Equal(t, middleware.DefaultDeadLetterRetryWait, time.Since(start))

		// The redelivery dead-letters it.
		msgs, err = h(message.NewMessage("m-1", []byte("{}")))
		require.NoError(t, err)
		require.Nil(t, msgs)
		require.Len(t, sink.Published(classifyTopic), 1)
	})
}

// The operation in the message context names the key, fingerprint,
// namespace and retention in the envelope, unless the final error already
// carries them.
func TestDeadLetterOperationFields(t *testing.T) {
	t.Parallel()
	op := &opctx.Op{Operation: idempotency.Operation{Namespace: "orders", Key: "op-key", Fingerprint: "op-fp", Retention: time.Hour}}
	run := func(err error) message.Metadata {
		t.Helper()
		h, sink := deadLetterStep(t, 0, failWith(err))
		msg := message.NewMessage("m-1", []byte("{}"))
		msg.SetContext(opctx.With(msg.Context(), op))
		_, herr := h(msg)
		require.NoError(t, herr)
		published := sink.Published(classifyTopic)
		require.Len(t, published, 1)
		return published[0].Metadata
	}

	md := run(retry.Permanent(errors.New("bad")))
	assert.Equal(t, "op-key", md.Get(dlq.KeyOperationKey))
	assert.Equal(t, "op-fp", md.Get(dlq.KeyFingerprint))
	assert.Equal(t, "orders", md.Get(dlq.KeyNamespace))
	assert.Equal(t, time.Hour.String(), md.Get(dlq.KeyRetention))

	fe := dlq.Final(dlq.ReasonExhausted, errors.New("spent"))
	fe.OperationKey, fe.Fingerprint, fe.Namespace, fe.Retention = "own-key", "own-fp", "own-ns", time.Minute
	md = run(fe)
	assert.Equal(t, "own-key", md.Get(dlq.KeyOperationKey))
	assert.Equal(t, "own-fp", md.Get(dlq.KeyFingerprint))
	assert.Equal(t, "own-ns", md.Get(dlq.KeyNamespace))
	assert.Equal(t, time.Minute.String(), md.Get(dlq.KeyRetention))
}
