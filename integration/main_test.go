package integration

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// A child consumer process: no tests, no leak check (it is SIGKILLed).
		os.Exit(childMain())
	}
	if os.Getenv(poisonChildEnv) == "1" {
		os.Exit(poisonChild()) // a poison-test consumer (poison_test.go)
	}
	// go-redis logs every failed dial through a process-wide logger; the
	// outage test makes hundreds on purpose. Silence it in this test binary
	// only (the failures are asserted, not read from the log).
	redis.SetLogger(quietLogger{})
	// After a failed dial go-redis probes the address again in a goroutine
	// that sleeps a second between tries and sees the pool closed only when
	// it wakes: the outage test's clients leave one behind for up to a
	// second after Close. It is go-redis's, bounded, and not a leak of ours.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
