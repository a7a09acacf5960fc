package memarchive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
)

// The alert rule in archive.RegisterMetrics' doc and docs/OPERATIONS.md name
// the metrics as the OpenTelemetry Prometheus exporter writes them: this
// scrapes them through that exporter. It is here rather than in dlq's own
// tests so that a module importing dlq (every user of handler) does not get
// the Prometheus client in its go.sum from "go mod tidy".
func TestArchiveMetricsPrometheusNames(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	mem, err := memarchive.New(dlq.WithClock(now))
	require.NoError(t, err)
	require.NoError(t, mem.Publish("dead", dlq.Wrap(message.NewMessage("a", nil),
		dlq.Failure{Reason: dlq.ReasonExhausted, Err: errors.New("x"), Topic: "orders", At: now().Add(-time.Hour)}, nil, "", "")))

	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, err = archive.RegisterMetrics(mp.Meter("surely"), mem, dlq.WithClock(now))
	require.NoError(t, err)

	families, err := registry.Gather()
	require.NoError(t, err)
	type series struct {
		topic, reason string
		value         float64
	}
	got := map[string][]series{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var s series
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "topic":
					s.topic = l.GetValue()
				case "reason":
					s.reason = l.GetValue()
				}
			}
			s.value = m.GetGauge().GetValue()
			got[f.GetName()] = append(got[f.GetName()], s)
		}
	}
	// The names and labels the alert rule's expressions use.
	require.Equal(t, []series{{"orders", "exhausted", 1}}, got["surely_dlq_archived"])
	require.Equal(t, []series{{"orders", "exhausted", 3600}}, got["surely_dlq_oldest_age_seconds"])
}
