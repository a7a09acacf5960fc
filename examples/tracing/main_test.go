package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain runs the consumer role when the test binary is re-executed as a
// child (the example re-executes its own binary).
func TestMain(m *testing.M) {
	var role func() error
	switch os.Getenv(envRole) {
	case "consumer":
		role = runConsumerProcess
	case "attempt":
		role = runAttemptProcess
	}
	if role != nil {
		if err := role(); err != nil {
			fmt.Fprintln(os.Stderr, os.Getenv(envRole)+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// timeout bounds each wait for a child's line.
const timeout = time.Minute

// The chain crosses two real processes, one of them SIGKILLed: the link
// from attempt 2 to attempt 1 can only come from the store's ledger.
func TestRedeliveryChainAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	ch, err := run(ctx, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)

	require.Len(t, ch.attempts, 3)
	a1, a2, a3 := ch.attempts[0], ch.attempts[1], ch.attempts[2]
	assert.Equal(t, "consumer-1", a1.Process)
	assert.False(t, a1.Ended, "attempt 1's process was killed inside it")
	assert.Equal(t, "consumer-2", a2.Process)
	assert.Equal(t, "consumer-2", a3.Process)
	assert.NotEqual(t, a1.PID, a2.PID, "two processes")

	for i, a := range ch.attempts {
		assert.Equal(t, "process orders", a.Name)
		assert.Equal(t, "consumer", a.Kind)
		assert.Equal(t, "nats", a.Attrs["messaging.system"])
		assert.Equal(t, "orders", a.Attrs["messaging.destination.name"])
		assert.Equal(t, "billing", a.Attrs["messaging.consumer.group.name"])
		assert.Equal(t, "process", a.Attrs["messaging.operation.type"])
		assert.Equal(t, ch.uuid, a.Attrs["messaging.message.id"])
		assert.True(t, hasLink(a, ch.producer.SpanID, "creation"), "attempt %d links to the producer's span", i+1)
	}
	// Attributes set after the claim exist only on ended spans.
	assert.Equal(t, "2", a2.Attrs["surely.attempt"])
	assert.Equal(t, "unknown", a2.Attrs["surely.previous"], "attempt 1's owner died holding the lease")
	assert.Equal(t, "retry", a2.Attrs["surely.outcome"])
	assert.Equal(t, "Error", a2.Status)
	assert.Contains(t, a2.ErrorMsg, "payment gateway timed out")
	assert.NotEmpty(t, a2.Attrs["surely.delivery_count"])
	assert.Equal(t, ch.uuid, a2.Attrs["surely.operation_key"])
	assert.Equal(t, "3", a3.Attrs["surely.attempt"])
	assert.Equal(t, "failed", a3.Attrs["surely.previous"])
	assert.Equal(t, "processed", a3.Attrs["surely.outcome"])
	assert.Empty(t, a3.Status)

	assert.True(t, hasLink(a2, a1.SpanID, "previous_attempt"), "attempt 2 → attempt 1, across processes, through the ledger")
	assert.True(t, hasLink(a3, a2.SpanID, "previous_attempt"), "attempt 3 → attempt 2, through the ledger")
	assert.Equal(t, 2, ch.linksBetween)
	assert.Contains(t, out.String(), "summary: attempts=3 processes=2 links_between_attempts=2 killed=1 final=processed")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(out.String()), "final=processed"), "the summary line comes last")
}

func hasLink(s *span, spanID, kind string) bool {
	for _, l := range s.Links {
		if l.SpanID == spanID && l.Attrs["surely.link"] == kind {
			return true
		}
	}
	return false
}
