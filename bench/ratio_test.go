package bench

import (
	"sync"
	"testing"
)

// baselines keeps, per comparison group, the ns/op of the group's baseline
// from its latest run in this process, so that every other member of the
// group reports its ratio to it from the same `go test` invocation.
var baselines sync.Map // group -> float64 ns/op

// nsPerOp is the measured time per operation of a finished run.
func nsPerOp(b *testing.B) float64 {
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// setBaseline records b's ns/op as group's baseline.
func setBaseline(b *testing.B, group string) {
	baselines.Store(group, nsPerOp(b))
}

// reportRatio reports b's ns/op divided by group's baseline as the metric
// unit (e.g. "x_bare": 2 means twice the time per message). It reports
// nothing when the baseline did not run (filtered out with -bench).
func reportRatio(b *testing.B, group, unit string) {
	if v, ok := baselines.Load(group); ok {
		b.ReportMetric(nsPerOp(b)/v.(float64), unit)
	}
}

// reportSpeedup reports group's baseline ns/op divided by b's: throughput
// relative to the baseline (2 means twice as many messages per second).
func reportSpeedup(b *testing.B, group, unit string) {
	if v, ok := baselines.Load(group); ok {
		b.ReportMetric(v.(float64)/nsPerOp(b), unit)
	}
}
