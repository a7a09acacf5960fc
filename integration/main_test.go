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
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
