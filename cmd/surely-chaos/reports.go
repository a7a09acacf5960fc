package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Lines a consumer prints on stdout about its work, besides those of
// consumer.go.
const (
	// ACKED <key> <token> <latency µs>: Complete returned nil for the
	// attempt with token (the operation is acknowledged); latency is from
	// the publish to then.
	lineAcked = "ACKED"
	// UNSURE <key> <token>: the effect transaction's COMMIT returned an
	// error (lease mode): it may have been applied all the same (a
	// connection lost after the server committed).
	lineUnsure = "UNSURE"
	// STATS <goroutines> <rss KiB> <heap in use KiB>: a sample of the
	// consumer's resources, every statsEvery.
	lineStats = "STATS"
)

// sample is one STATS line of a consumer.
type sample struct {
	at         time.Duration // since the run's start
	goroutines int
	rssKiB     int
	heapKiB    int
}

// reports gathers what the consumers print about their work.
type reports struct {
	mu        sync.Mutex
	start     time.Time
	ackedBy   map[string][]string      // key -> tokens whose Complete returned nil
	latencies []time.Duration          // of the first acknowledgement of each key
	unsureBy  map[string]int           // key+" "+token -> COMMIT errors
	series    map[int][]sample         // pid -> samples
	fenced    int                      // attempts refused by the store (FENCED lines)
	ackedAt   map[string]time.Duration // key+" "+token -> when its ACKED line came, since start
}

func (r *reports) leaseLost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fenced++
}

func (r *reports) fencedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fenced
}

// newReports times everything from start (the run's log's start).
func newReports(start time.Time) *reports {
	return &reports{start: start, ackedBy: map[string][]string{}, unsureBy: map[string]int{}, series: map[int][]sample{},
		ackedAt: map[string]time.Duration{}}
}

func (r *reports) acked(key, token, micros string) {
	us, _ := strconv.ParseInt(micros, 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ackedBy[key]) == 0 && us > 0 {
		r.latencies = append(r.latencies, time.Duration(us)*time.Microsecond)
	}
	r.ackedBy[key] = append(r.ackedBy[key], token)
	r.ackedAt[key+" "+token] = time.Since(r.start)
}

// ackedWhen tells when the ACKED line of (key, token) came, since start.
func (r *reports) ackedWhen(key, token string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ackedAt[key+" "+token]
}

// since is the time from the start of the reports (the run's consumers).
func (r *reports) since() time.Duration { return time.Since(r.start) }

func (r *reports) unsure(key, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsureBy[key+" "+token]++
}

func (r *reports) unsureOf(key, token string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unsureBy[key+" "+token]
}

func (r *reports) stats(pid int, g, rss, heap string) {
	s := sample{at: time.Since(r.start)}
	s.goroutines, _ = strconv.Atoi(g)
	s.rssKiB, _ = strconv.Atoi(rss)
	s.heapKiB, _ = strconv.Atoi(heap)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.series[pid] = append(r.series[pid], s)
}

// ackedTokens returns every acknowledged (key, token).
func (r *reports) ackedTokens() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]string, len(r.ackedBy))
	for k, v := range r.ackedBy {
		out[k] = slices.Clone(v)
	}
	return out
}

// percentiles of the processing latency (publish to acknowledgement).
type percentiles struct {
	n                  int
	p50, p90, p99, max time.Duration
}

func (r *reports) latency() percentiles {
	r.mu.Lock()
	l := slices.Clone(r.latencies)
	r.mu.Unlock()
	if len(l) == 0 {
		return percentiles{}
	}
	slices.Sort(l)
	at := func(q float64) time.Duration {
		return l[min(len(l)-1, int(math.Ceil(q*float64(len(l))))-1)]
	}
	return percentiles{n: len(l), p50: at(0.50), p90: at(0.90), p99: at(0.99), max: l[len(l)-1]}
}

func (p percentiles) String() string {
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
	}
	return fmt.Sprintf("latency_ms_p50=%s latency_ms_p90=%s latency_ms_p99=%s latency_ms_max=%s", ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max))
}

// growth is how one consumer's resources moved between the first window
// after warm-up and the last window of the run.
type growth struct {
	pid                     int
	rssFrom, rssTo          float64 // KiB, window means
	goroutFrom, goroutTo    float64
	rssGrowth, goroutGrowth float64 // fractions: 0.05 is +5 %
	samples                 int
}

// flatness compares, for every consumer sampled over the whole soak, the
// mean of its samples in [warm, warm+window) with the mean of its last
// window.
func (r *reports) flatness(warm, window, end time.Duration) []growth {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]int, 0, len(r.series))
	for pid := range r.series {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	var out []growth
	for _, pid := range pids {
		var a, b []sample
		for _, s := range r.series[pid] {
			if s.at >= warm && s.at < warm+window {
				a = append(a, s)
			}
			if s.at >= end-window {
				b = append(b, s)
			}
		}
		if len(a) == 0 || len(b) == 0 {
			continue // not alive for the whole soak (killed, or started late)
		}
		g := growth{pid: pid, samples: len(r.series[pid])}
		g.rssFrom, g.goroutFrom = means(a)
		g.rssTo, g.goroutTo = means(b)
		g.rssGrowth = g.rssTo/g.rssFrom - 1
		g.goroutGrowth = g.goroutTo/g.goroutFrom - 1
		out = append(out, g)
	}
	return out
}

func means(s []sample) (rss, gor float64) {
	for _, x := range s {
		rss += float64(x.rssKiB)
		gor += float64(x.goroutines)
	}
	return rss / float64(len(s)), gor / float64(len(s))
}

// allSeries returns a copy of every consumer's samples.
func (r *reports) allSeries() map[int][]sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int][]sample, len(r.series))
	for pid, s := range r.series {
		out[pid] = slices.Clone(s)
	}
	return out
}
