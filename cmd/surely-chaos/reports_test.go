package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReportsLatencyAndFlatness: percentiles of the first acknowledgement
// of each key, and window means of the samples.
func TestReportsLatencyAndFlatness(t *testing.T) {
	t.Parallel()
	r := newReports(time.Now())
	for i := 1; i <= 100; i++ {
		r.acked("k"+strconv.Itoa(i), "t", strconv.Itoa(i*1000)) // i ms
	}
	r.acked("k1", "t2", "999999999") // a second acknowledgement of a key does not count
	p := r.latency()
	require.Equal(t, 100, p.n)
	require.Equal(t, 50*time.Millisecond, p.p50)
	require.Equal(t, 90*time.Millisecond, p.p90)
	require.Equal(t, 99*time.Millisecond, p.p99)
	require.Equal(t, 100*time.Millisecond, p.max)
	require.Equal(t, []string{"t", "t2"}, r.ackedTokens()["k1"])

	r.series[7] = []sample{
		{at: 10 * time.Second, goroutines: 20, rssKiB: 1000},
		{at: 30 * time.Second, goroutines: 20, rssKiB: 1000},
		{at: 35 * time.Second, goroutines: 22, rssKiB: 1100},
		{at: 90 * time.Second, goroutines: 21, rssKiB: 1050},
		{at: 95 * time.Second, goroutines: 23, rssKiB: 1150},
	}
	r.series[8] = []sample{{at: 90 * time.Second, goroutines: 5, rssKiB: 10}} // started late: not compared
	g := r.flatness(30*time.Second, 10*time.Second, 100*time.Second)
	require.Len(t, g, 1)
	require.Equal(t, 7, g[0].pid)
	require.InDelta(t, 1050, g[0].rssFrom, 0.01)
	require.InDelta(t, 1100, g[0].rssTo, 0.01)
	require.InDelta(t, 21, g[0].goroutFrom, 0.01)
	require.InDelta(t, 22, g[0].goroutTo, 0.01)
	require.InDelta(t, 1100.0/1050-1, g[0].rssGrowth, 1e-9)

	svg := plotSVG(r.allSeries(), 30*time.Second)
	require.True(t, strings.HasPrefix(svg, "<svg"))
	require.Equal(t, 4, strings.Count(svg, "<polyline"), "two panels, two consumers")
}

// TestURLRewrite: a consumer's URLs point at its proxies.
func TestURLRewrite(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"amqp://guest:guest@127.0.0.1:5672/",
		"nats://127.0.0.1:4222",
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	} {
		hp, err := hostPort(raw)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(hp, "127.0.0.1:"), hp)
		out, err := withHost(raw, "127.0.0.1:1")
		require.NoError(t, err)
		require.Equal(t, strings.Replace(raw, hp, "127.0.0.1:1", 1), out)
	}
	_, err := hostPort("sqlite-file.db")
	require.Error(t, err)
}
