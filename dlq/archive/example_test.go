package archive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
)

// Ingest drains a broker's dead-letter topic into an archive: a message is
// acked only once the archive stored it.
func ExampleIngest() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	broker := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer func() { _ = broker.Close() }()
	arch, _ := memarchive.New() // tests and examples only: use redisarchive or sqlarchive

	src := message.NewMessage("order-7", []byte("{}"))
	_ = broker.Publish("orders.dead", dlq.Wrap(src, dlq.Failure{Reason: dlq.ReasonExhausted, Topic: "orders", Attempts: 5}, nil, "", ""))

	done := make(chan error, 1)
	go func() { done <- archive.Ingest(ctx, broker, "orders.dead", arch, archive.WithRetryDelay(time.Second)) }()

	var entries []archive.Entry
	for len(entries) == 0 {
		time.Sleep(10 * time.Millisecond) // Ingest runs in the background
		entries, _ = arch.List(ctx, archive.Filter{Topic: "orders"}, archive.Page{})
	}
	cancel()
	fmt.Println(<-done, entries[0].Reason, entries[0].Attempts, entries[0].Message.Metadata.Get(dlq.KeyOriginalUUID))
	// Output:
	// <nil> exhausted 5 order-7
}

// RegisterMetrics exports the archive's backlog for alerting (see
// its doc for Prometheus rules); here read once through a ManualReader.
func ExampleRegisterMetrics() {
	arch, _ := memarchive.New() // tests and examples only
	at := time.Now().Add(-2 * time.Hour)
	_ = arch.Publish("dead", dlq.Wrap(message.NewMessage("m-1", nil), dlq.Failure{Reason: dlq.ReasonExhausted, Topic: "orders", At: at}, nil, "", ""))

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	reg, err := archive.RegisterMetrics(provider.Meter("surely"), arch, archive.WithMetricsInterval(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = reg.Unregister() }()

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Gauge[int64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		case metricdata.Gauge[float64]:
			fmt.Println(m.Name, d.DataPoints[0].Value >= 7200)
		}
	}
	// Output:
	// surely.dlq.archived 1
	// surely.dlq.oldest_age true
}
