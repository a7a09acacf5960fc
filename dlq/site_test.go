package dlq_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
)

// stackError carries the stack it was created on, as
// github.com/go-errors/errors does (Callers).
type stackError struct{ pcs []uintptr }

func (e *stackError) Error() string      { return "gateway: declined" }
func (e *stackError) Callers() []uintptr { return e.pcs }

// chargeFails returns the line it creates its error on, and the error.
func chargeFails() (int, error) {
	pcs := make([]uintptr, 16)
	n := runtime.Callers(1, pcs)
	_, _, line, _ := runtime.Caller(0)
	return line - 1, &stackError{pcs[:n]}
}

// Wrap writes the error's call site, which no redactor sees (a code
// location, not data), and ParseEnvelope reads it back.
func TestEnvelopeErrorSite(t *testing.T) {
	t.Parallel()
	line, err := chargeFails()
	want := fmt.Sprintf("dlq_test.chargeFails (site_test.go:%d)", line)
	redactAll := func(string) string { return "[redacted]" }
	f := dlq.Failure{Reason: dlq.ReasonPermanent, Err: fmt.Errorf("charge: %w", err)}
	env := dlq.Wrap(message.NewMessage("u-1", nil), f, redactAll, "", "")
	require.Equal(t, want, env.Metadata.Get(dlq.KeyErrorSite))
	require.Equal(t, "[redacted]", env.Metadata.Get(dlq.KeyError))

	got, perr := dlq.ParseEnvelope(env)
	require.NoError(t, perr)
	require.Equal(t, want, got.ErrorSite)
}
