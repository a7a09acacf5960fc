package archive_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
)

// countingArchive counts Stats calls and can fail them.
type countingArchive struct {
	archive.Archive
	mu    sync.Mutex
	stats int
	fail  bool
}

func (c *countingArchive) Stats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	c.mu.Lock()
	c.stats++
	fail := c.fail
	c.mu.Unlock()
	if fail {
		return archive.Stats{}, errors.New("archive unreachable")
	}
	return c.Archive.Stats(ctx, f)
}

func (c *countingArchive) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type point struct {
	count int64
	age   float64
}

// collect reads the gauges as a Prometheus scrape would.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[[2]string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := map[[2]string]point{}
	key := func(s attribute.Set) [2]string {
		topic, _ := s.Value(attribute.Key("topic"))
		reason, _ := s.Value(attribute.Key("reason"))
		return [2]string{topic.AsString(), reason.AsString()}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "surely.dlq.archived":
				require.Equal(t, "{message}", m.Unit)
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					p := out[key(dp.Attributes)]
					p.count = dp.Value
					out[key(dp.Attributes)] = p
				}
			case "surely.dlq.oldest_age":
				require.Equal(t, "s", m.Unit)
				for _, dp := range m.Data.(metricdata.Gauge[float64]).DataPoints {
					p := out[key(dp.Attributes)]
					p.age = dp.Value
					out[key(dp.Attributes)] = p
				}
			}
		}
	}
	return out
}

func TestArchiveMetrics(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	mem, err := memarchive.New(dlq.WithClock(clock.Now))
	require.NoError(t, err)
	ar := &countingArchive{Archive: mem}
	dead := func(id, topic string, reason dlq.Reason, age time.Duration) *message.Message {
		return dlq.Wrap(message.NewMessage(id, nil), dlq.Failure{Reason: reason, Err: errors.New("x"), Topic: topic, At: clock.Now().Add(-age)}, nil, "", "")
	}
	require.NoError(t, ar.Publish("dead",
		dead("a", "orders", dlq.ReasonExhausted, time.Hour),
		dead("b", "orders", dlq.ReasonExhausted, 2*time.Hour),
		dead("c", "orders", dlq.ReasonPermanent, time.Minute),
		dead("d", "payments", dlq.ReasonExhausted, 10*time.Second),
		message.NewMessage("plain", nil), // no topic, no reason: archived now
	))

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := archive.RegisterMetrics(mp.Meter("surely"), ar,
		archive.WithMetricsInterval(time.Minute), dlq.WithClock(clock.Now))
	require.NoError(t, err)

	want := map[[2]string]point{
		{"orders", "exhausted"}:   {2, 7200},
		{"orders", "permanent"}:   {1, 60},
		{"payments", "exhausted"}: {1, 10},
		{"", ""}:                  {1, 7200}, // the widest selection's oldest: an upper bound
	}
	require.Equal(t, want, collect(t, reader))
	queries := ar.calls()
	require.Positive(t, queries)

	// Within the interval a scrape reads the cache: no query, ages move on.
	clock.Advance(30 * time.Second)
	got := collect(t, reader)
	require.Equal(t, queries, ar.calls(), "a scrape within the interval does not query the archive")
	require.InDelta(t, 7230, got[[2]string{"orders", "exhausted"}].age, 0.001)

	// After the interval the next scrape refreshes once.
	require.NoError(t, ar.Publish("dead", dead("e", "payments", dlq.ReasonConflict, 0)))
	clock.Advance(31 * time.Second)
	got = collect(t, reader)
	require.Greater(t, ar.calls(), queries)
	require.Equal(t, point{1, 31}, got[[2]string{"payments", "conflict"}], "dead-lettered 31s before the scrape")

	// A failing archive reports nothing (absent series), and is not
	// queried again before the interval.
	ar.mu.Lock()
	ar.fail = true
	ar.mu.Unlock()
	clock.Advance(time.Minute)
	require.Empty(t, collect(t, reader))
	failed := ar.calls()
	require.Empty(t, collect(t, reader))
	require.Equal(t, failed, ar.calls())

	require.NoError(t, reg.Unregister())
	clock.Advance(time.Hour)
	require.Empty(t, collect(t, reader))
}

func TestArchiveMetricsOptions(t *testing.T) {
	t.Parallel()
	mem, err := memarchive.New()
	require.NoError(t, err)
	meter := sdkmetric.NewMeterProvider().Meter("surely")
	_, err = archive.RegisterMetrics(nil, mem)
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	_, err = archive.RegisterMetrics(meter, nil)
	require.ErrorIs(t, err, dlq.ErrInvalidOption)
	for name, o := range map[string]dlq.Option{
		"interval":   archive.WithMetricsInterval(0),
		"max series": archive.WithMetricsMaxSeries(0),
		"logger":     dlq.WithLogger(nil),
		"clock":      dlq.WithClock(nil),
		// An option of another constructor of the family is refused.
		"retry delay": archive.WithRetryDelay(time.Second),
	} {
		_, err := archive.RegisterMetrics(meter, mem, o)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, name)
	}
}

func TestArchiveMetricsMaxSeriesKeepsTheLargest(t *testing.T) {
	t.Parallel()
	mem, err := memarchive.New()
	require.NoError(t, err)
	for i, topic := range []string{"a", "b", "b", "c", "c", "c"} {
		m := dlq.Wrap(message.NewMessage(string(rune('0'+i)), nil), dlq.Failure{Reason: dlq.ReasonPermanent, Topic: topic}, nil, "", "")
		require.NoError(t, mem.Publish("dead", m))
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, err = archive.RegisterMetrics(mp.Meter("surely"), mem, archive.WithMetricsMaxSeries(2))
	require.NoError(t, err)
	got := collect(t, reader)
	require.Len(t, got, 2)
	require.Equal(t, int64(3), got[[2]string{"c", "permanent"}].count)
	require.Equal(t, int64(2), got[[2]string{"b", "permanent"}].count)
}

// filterFailingArchive fails the Stats calls whose filter fails selects.
type filterFailingArchive struct {
	archive.Archive
	fails func(archive.Filter) bool
}

func (a filterFailingArchive) Stats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	if a.fails(f) {
		return archive.Stats{}, errors.New("archive unreachable")
	}
	return a.Archive.Stats(ctx, f)
}

func TestArchiveMetricsSinglePairWithoutTopicNeedsOneQuery(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	mem, err := memarchive.New(dlq.WithClock(clock.Now))
	require.NoError(t, err)
	ar := &countingArchive{Archive: mem}
	for i, age := range []time.Duration{time.Minute, time.Hour} {
		f := dlq.Failure{Reason: dlq.ReasonPermanent, At: clock.Now().Add(-age)}
		m := dlq.Wrap(message.NewMessage(string(rune('a'+i)), nil), f, nil, "", "")
		require.NoError(t, ar.Publish("dead", m))
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, err = archive.RegisterMetrics(mp.Meter("surely"), ar, dlq.WithClock(clock.Now))
	require.NoError(t, err)

	require.Equal(t, map[[2]string]point{{"", "permanent"}: {2, 3600}}, collect(t, reader))
	require.Equal(t, 1, ar.calls(), "the archive's own Stats is the one pair's")
}

func TestArchiveMetricsFailingNarrowQueryReportsNothing(t *testing.T) {
	t.Parallel()
	mem, err := memarchive.New()
	require.NoError(t, err)
	for i, reason := range []dlq.Reason{dlq.ReasonPermanent, dlq.ReasonExhausted, dlq.ReasonPermanent} {
		m := dlq.Wrap(message.NewMessage(string(rune('a'+i)), nil), dlq.Failure{Reason: reason, Topic: "orders"}, nil, "", "")
		require.NoError(t, mem.Publish("dead", m))
	}
	for name, fails := range map[string]func(archive.Filter) bool{
		"per topic": func(f archive.Filter) bool { return f.Topic != "" && f.Reason == "" },
		"per pair":  func(f archive.Filter) bool { return f.Reason != "" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			_, err := archive.RegisterMetrics(mp.Meter("surely"), filterFailingArchive{Archive: mem, fails: fails})
			require.NoError(t, err)
			require.Empty(t, collect(t, reader), "a failed query reports no series, not partial ones")
		})
	}
}
