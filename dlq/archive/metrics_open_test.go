package archive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
)

// The gauges count open entries only: an entry a replay took (replayed,
// then resolved) or a purge discarded leaves them, so the alert on them
// stops firing.
func TestArchiveMetricsCountOpenEntries(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	mem, err := memarchive.New(dlq.WithClock(clock.Now))
	require.NoError(t, err)
	dead := func(id string, age time.Duration) *message.Message {
		return dlq.Wrap(message.NewMessage(id, nil), dlq.Failure{Reason: dlq.ReasonExhausted, Err: errors.New("x"),
			Topic: "orders", At: clock.Now().Add(-age)}, nil, "", "")
	}
	a, b, c := dead("a", 2*time.Hour), dead("b", time.Hour), dead("c", time.Minute)
	require.NoError(t, mem.Publish("dead", a, b, c))

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, err = archive.RegisterMetrics(mp.Meter("surely"), mem, archive.WithMetricsInterval(time.Second), dlq.WithClock(clock.Now))
	require.NoError(t, err)
	require.Equal(t, point{3, 7200}, collect(t, reader)[[2]string{"orders", "exhausted"}])

	ctx := context.Background()
	_, err = mem.Mark(ctx, archive.Mark{To: archive.StateReplayed, Run: "r1"}, a.UUID)
	require.NoError(t, err)
	_, err = mem.Mark(ctx, archive.Mark{To: archive.StateDiscarded, Note: "obsolete"}, c.UUID)
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	require.Equal(t, point{1, 3602}, collect(t, reader)[[2]string{"orders", "exhausted"}], "only b is open")

	_, err = mem.Mark(ctx, archive.Mark{To: archive.StateResolved, Run: "r1"}, b.UUID)
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	require.Empty(t, collect(t, reader), "no open entry: no series")
}
