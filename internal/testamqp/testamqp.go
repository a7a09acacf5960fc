// Package testamqp finds the RabbitMQ server that tests run against
// (SURELY_AMQP_URL).
//
// It is apart from internal/testbroker, which embeds a NATS server, so that
// the tests of adapters/amqp import nothing but the broker's client: "go
// mod tidy" in a module that imports adapters/amqp loads those tests and
// records every module they import in the user's go.sum (see
// internal/tidycheck).
package testamqp

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/internal/testenv"
)

// URL returns the URL of the RabbitMQ server of SURELY_AMQP_URL (e.g.
// amqp://guest:guest@127.0.0.1:5672/) after checking that it accepts a
// connection. Tests on the shared server must use their own randomly named
// queues and exchanges, delete them, and touch nothing else.
func URL(t testing.TB) string {
	t.Helper()
	raw := testenv.URL(t, "SURELY_AMQP_URL")
	shown := raw
	if u, err := url.Parse(raw); err == nil {
		shown = u.Redacted()
	}
	c, err := amqp.DialConfig(raw, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("RabbitMQ at %s does not answer: %v", shown, err))
	}
	_ = c.Close()
	return raw
}
