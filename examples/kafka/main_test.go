package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Sarama's metrics (go-metrics) start one ticker goroutine per
		// process on first use and never stop it.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// TestRun runs the example end to end on its in-process Kafka and checks
// the summary: every order shipped once or dead-lettered, and each kind of
// message counted as the batch was built (makeBatch).
func TestRun(t *testing.T) {
	var out bytes.Buffer
	s, err := run(t.Context(), &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)

	assert.Zero(t, s.Lost, "every order is shipped or dead-lettered")
	assert.Zero(t, s.DoubleEffects, "no order is shipped twice")
	// A consumer dropped from its group (a machine stalled past the session
	// timeout) gets messages again: more duplicates, never more effects.
	assert.GreaterOrEqual(t, s.Duplicates, 8, "each extra copy is acked without running")
	s.Duplicates = 8
	assert.Equal(t, summary{
		Published:    50, // 40 orders, 8 of them twice, and 2 poison orders
		Processed:    40,
		Duplicates:   8,
		Retried:      5, // orders 7, 14, 21, 28, 35
		DeadLettered: 2,
	}, s)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	assert.True(t, strings.HasPrefix(last, "summary: published=50 processed=40 duplicates="), "the summary line comes last: %s", last)
	assert.True(t, strings.HasSuffix(last, " retried=5 dead_lettered=2 lost=0 double_effects=0"), last)
	assert.Equal(t, 1, strings.Count(out.String(), "summary:"), "exactly one summary line")
	assert.Equal(t, 2, strings.Count(out.String(), `reason=permanent error="unknown product"`))
}
