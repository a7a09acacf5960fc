package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/internal/testenv"
)

// TestPauseGivesUpOnceSettled: a pause waiting for an armed consumer to
// reach its pause point ends as soon as the run is settled (nothing is left
// to deliver), instead of trying consumer after consumer for pauseReach
// each and holding the end of the run that long.
func TestPauseGivesUpOnceSettled(t *testing.T) {
	t.Parallel()
	// An idle consumer: it ignores the arming signals and never prints
	// PAUSE, like a consumer that has no delivery left.
	sh := testenv.Binary(t, "sh")
	var out bytes.Buffer
	log := &logger{w: &out, start: time.Now()}
	cs, err := newChildren(sh, []string{"-c", "trap '' USR1 USR2; echo " + lineReady + " $$; exec cat >/dev/null"}, childConfig{}, log, false)
	require.NoError(t, err)
	c, err := cs.start()
	require.NoError(t, err)
	t.Cleanup(cs.stopAll)
	// Bounded wait for its READY line: from then on it ignores the signals.
	for i := 0; !isReady(cs, c); i++ {
		require.Less(t, i, 1000, "the consumer never printed READY")
		time.Sleep(10 * time.Millisecond)
	}

	res := result{}
	f := &faults{log: log, rnd: rand.New(rand.NewPCG(1, 2)), cs: cs, res: &res}
	f.reach, f.stopReach = context.WithCancel(t.Context())
	t.Cleanup(f.stopReach)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.pause(t.Context(), 0)
	}()
	// Bounded wait until the pause has armed the consumer.
	for i := 0; !cs.wasPaused(c.pid); i++ {
		require.Less(t, i, 1000, "the pause never armed the consumer")
		time.Sleep(10 * time.Millisecond)
	}
	f.stopReach() // the run is settled
	<-done

	log.mu.Lock()
	lines := out.String()
	log.mu.Unlock()
	require.Contains(t, lines, "every operation settled before a consumer reached its pause point")
	require.NotContains(t, lines, "did not reach its pause point", "no consumer waited out pauseReach")
	require.Zero(t, res.pauses)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	require.False(t, c.paused, "the consumer is free again")
}

func isReady(cs *children, c *child) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return c.ready
}

// TestPickToPauseOnlyReady: a consumer that has not printed READY yet is
// never armed: the SIGUSR1 could arrive before its handler is installed.
func TestPickToPauseOnlyReady(t *testing.T) {
	t.Parallel()
	fresh, up := &child{pid: 1}, &child{pid: 2, ready: true}
	cs := &children{live: []*child{fresh, up}, paused: map[int]bool{}}
	for i := range 4 {
		c := cs.pickToPause(i)
		require.Same(t, up, c, "pick %d", i)
		cs.unpause(c)
	}
	require.Same(t, up, cs.pickToPause(0))
	require.Nil(t, cs.pickToPause(0), "only a fresh one left")
	require.True(t, cs.wasPaused(up.pid))
	require.False(t, cs.wasPaused(fresh.pid))
}

// A consumer picked for a kill is not armed for a pause in the moment
// before the kill, nor picked for another kill.
func TestPickedForKillIsNotPaused(t *testing.T) {
	t.Parallel()
	a, b := &child{pid: 1, ready: true}, &child{pid: 2, ready: true}
	cs := &children{live: []*child{a, b}, paused: map[int]bool{}}
	doomed := cs.pick(0)
	require.NotNil(t, doomed)
	other := b
	if doomed == b {
		other = a
	}
	for i := range 4 {
		c := cs.pickToPause(i)
		require.Same(t, other, c, "pause pick %d", i)
		cs.unpause(c)
	}
	require.Same(t, other, cs.pick(1), "the other one")
	require.Nil(t, cs.pick(0), "both picked for kills")
}
