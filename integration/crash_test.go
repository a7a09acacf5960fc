package integration

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
)

// TestCrashPoints kills a consumer process (SIGKILL) at each point of the
// claim → effect → Complete → ack sequence, restarts one, and checks what
// the redelivery did.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		tag   string
		crash crashPoint
		// effects after recovery; (b) is lease mode's documented window.
		wantEffects int64
		// how the restarted consumer's delivery ends.
		final string
		// durable claims made for the key.
		wantAttempts int
	}{
		{"a_before_effect", "crash-a", crashBeforeEffect, 1, "processed", 2},
		{"b_after_effect_before_complete", "crash-b", crashAfterEffect, 2, "processed", 2},
		{"c_after_complete_before_ack", "crash-c", crashAfterComplete, 1, "duplicate", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, tc.tag)
			const key = "order-1"
			last := s.publish(t, order(key))

			cfg := baseConfig()
			cfg.Crash = tc.crash
			first := s.startChild(t, cfg)
			first.WaitFor(t, 20*time.Second, "AT "+string(tc.crash)+" "+key)
			first.Kill()

			second := s.startChild(t, baseConfig())
			second.WaitFor(t, 20*time.Second, "OUTCOME "+tc.final+" "+key)
			s.waitAcked(t, last, 10*time.Second)

			effects := s.effects(t, key)
			require.GreaterOrEqual(t, effects, int64(1), "the message was lost: acked without its effect")
			require.Equal(t, tc.wantEffects, effects)
			rec := s.record(t, key)
			require.Equal(t, idempotency.StateDone, rec.State)
			require.Equal(t, tc.wantAttempts, rec.Attempts, "every claim is counted durably, the killed one too")
			require.Equal(t, "none", s.previous(t, key, 1))
			require.Empty(t, s.deadLetters(t), "nothing dead-lettered")

			switch tc.crash {
			case crashBeforeEffect, crashAfterEffect:
				// The killed owner's lease expired without Complete or
				// Release: the second attempt is told the effect may have
				// happened. In (a) it had not, in (b) it had: the store
				// cannot tell, which is why the handler must reconcile.
				require.Equal(t, string(idempotency.ResultUnknown), s.previous(t, key, 2),
					"the second attempt's handler saw Previous.Result")
				require.Len(t, rec.History, 2)
				require.Equal(t, idempotency.ResultUnknown, rec.History[0].Result)
				require.Equal(t, idempotency.ResultDone, rec.History[1].Result)
			case crashAfterComplete:
				require.Empty(t, s.previous(t, key, 2), "the redelivery is a duplicate: the handler did not run again")
				require.Len(t, rec.History, 1)
				require.Equal(t, idempotency.ResultDone, rec.History[0].Result)
			}
		})
	}
}

// TestCrashLoopReachesDeadLetter: a message that kills its consumer on every
// attempt. The attempt count lives in the store, so it survives the crashes:
// after MaxAttempts claims the next consumer dead-letters it without running
// it, instead of crash-looping forever.
func TestCrashLoopReachesDeadLetter(t *testing.T) {
	t.Parallel()
	s := setup(t, "crashloop")
	const key = "order-poison"
	src := order(key)
	last := s.publish(t, src)

	cfg := baseConfig()
	cfg.Crash = crashAlways
	cfg.MaxAttempts = 3
	var crashed []int
	deadLettered := false
	for restart := 0; restart < 10 && !deadLettered; restart++ {
		c := s.startChild(t, cfg)
		line := c.WaitFor(t, 20*time.Second, "AT "+string(crashAlways)+" "+key, "OUTCOME dead_lettered "+key)
		if strings.HasPrefix(line, "OUTCOME") {
			deadLettered = true
			break
		}
		f := strings.Fields(line) // AT always <key> <attempt>
		attempt, err := strconv.Atoi(f[3])
		require.NoError(t, err)
		crashed = append(crashed, attempt)
		c.Kill()
	}
	require.True(t, deadLettered, "not dead-lettered after 10 consumer restarts (crashed on attempts %v)", crashed)
	require.Equal(t, []int{1, 2, 3}, crashed, "one durable attempt per crashed process")
	s.waitAcked(t, last, 10*time.Second)

	// A dead letter is published once per delivery that finds the record
	// EXHAUSTED (at least once, like the source). Here the last consumer
	// waits out the dead owner's lease (in_progress) longer than MaxIdle, so
	// redisstream's claim loop may hand it its own in-flight entry a second
	// time: then the dead letter appears twice, as the same message (same
	// UUID), which a dead-letter consumer dedups.
	dead := s.deadLetters(t)
	require.NotEmpty(t, dead)
	for _, d := range dead {
		require.Equal(t, envelope.DeadLetterUUID(src.UUID), d.UUID, "every copy is the same message")
		require.Equal(t, src.UUID, d.Metadata.Get(dlq.KeyOriginalUUID))
		require.Equal(t, string(src.Payload), string(d.Payload), "payload byte for byte")
		require.Equal(t, "acme", d.Metadata.Get("tenant"), "original metadata travels")
		require.Equal(t, string(dlq.ReasonExhausted), d.Metadata.Get(dlq.KeyReason))
		require.Equal(t, "3", d.Metadata.Get(dlq.KeyAttempts), "counted across process restarts")
		require.Equal(t, key, d.Metadata.Get(dlq.KeyOperationKey))
		require.Equal(t, s.n.Group(), d.Metadata.Get(dlq.KeyConsumerGroup))
		require.Equal(t, s.n.Stream(), d.Metadata.Get(dlq.KeyOriginalTopic))
		hist, err := envelope.ParseHistory(d.Metadata.Get(dlq.KeyHistory))
		require.NoError(t, err)
		require.Len(t, hist, 3)
		for i, h := range hist {
			require.Equal(t, i+1, h.Attempt)
			require.Equal(t, idempotency.ResultUnknown, h.Result, "each owner died holding its lease")
		}
	}
	if len(dead) > 1 {
		t.Logf("%d copies of the dead letter (one per delivery of the exhausted message)", len(dead))
	}

	require.Zero(t, s.effects(t, key), "the effect never ran")
	rec := s.record(t, key)
	require.Equal(t, idempotency.StateExhausted, rec.State)
	require.Equal(t, 3, rec.Attempts)
}

// TestStaleOwnerIsFenced: a consumer that hangs (SIGSTOP, not dead) past its
// lease is taken over by another process, which completes the operation.
// When the hung one resumes, its overdue lease extension and its Complete
// carry a stale fencing token: it gets ErrLeaseLost (outcome lease_lost,
// nacked), and the successor's DONE record stays as it was. The refused
// extension cancels its handler at once, but whether that comes before the
// handler's effect is a race on resuming: the effect may run a second time.
// Lease mode cannot stop an effect outside the store, which is why the
// handler gets the token to guard its own writes.
func TestStaleOwnerIsFenced(t *testing.T) {
	t.Parallel()
	s := setup(t, "fenced")
	const key = "order-hung"
	last := s.publish(t, order(key))

	hungCfg := baseConfig()
	hungCfg.HandlerSleep = 2500 * time.Millisecond
	hung := s.startChild(t, hungCfg)
	hung.WaitFor(t, 15*time.Second, "RUN "+key+" 1 ")
	require.NoError(t, hung.Cmd.Process.Signal(syscall.SIGSTOP))

	successor := s.startChild(t, baseConfig())
	successor.WaitFor(t, 15*time.Second, "OUTCOME processed "+key)
	s.waitAcked(t, last, 10*time.Second)
	done := s.record(t, key)
	require.Equal(t, idempotency.StateDone, done.State)
	require.Equal(t, 2, done.Attempts)

	require.NoError(t, hung.Cmd.Process.Signal(syscall.SIGCONT))
	// Reported after the chain's delayed nack (defaults.MaxInProgressWait).
	hung.WaitFor(t, 15*time.Second, "OUTCOME lease_lost "+key)

	rec := s.record(t, key)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, done.Token, rec.Token, "the stale owner did not overwrite its successor's record")
	require.Equal(t, 2, rec.Attempts)
	require.Len(t, rec.History, 2)
	require.Equal(t, idempotency.ResultUnknown, rec.History[0].Result, "the hung attempt's lease expired")
	require.Equal(t, idempotency.ResultDone, rec.History[1].Result)
	require.Equal(t, string(idempotency.ResultUnknown), s.previous(t, key, 2))
	effects := s.effects(t, key)
	require.True(t, effects == 1 || effects == 2, "the successor's effect, and the stale one's unless its lost lease canceled it first: %d", effects)
	require.Empty(t, s.deadLetters(t))
}
