package archive

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/middleware"
)

// The gauges RegisterMetrics registers (the package doc's "Metrics" lists
// them). Each carries the attributes middleware.AttrTopic (the original
// topic) and middleware.AttrReason, the keys of the middleware's metrics.
const (
	// MetricArchived is the number of open dead letters.
	MetricArchived = "surely.dlq.archived"
	// MetricOldestAge is the age in seconds of the oldest open dead letter.
	MetricOldestAge = "surely.dlq.oldest_age"
)

// The attributes of the gauges.
const (
	attrTopic  = middleware.AttrTopic
	attrReason = middleware.AttrReason
)

// defaultMetricsInterval is the least time between two archive queries of
// the gauges, unless WithMetricsInterval is given.
const defaultMetricsInterval = 30 * time.Second

// openOnly selects the open entries: the gauges count nothing else.
var openOnly = []State{StateOpen}

// metricsTimeout bounds one refresh of the gauges.
const metricsTimeout = 10 * time.Second

// defaultMetricsMaxSeries bounds the (topic, reason) pairs reported,
// unless WithMetricsMaxSeries is given.
const defaultMetricsMaxSeries = 500

// Names the options of RegisterMetrics record.
const (
	nameMetricsInterval  = "archive.WithMetricsInterval"
	nameMetricsMaxSeries = "archive.WithMetricsMaxSeries"
)

// WithMetricsInterval sets the least time between two archive queries of
// RegisterMetrics (default 30s): collections within it
// report the cached values, so frequent scrapes do not load the archive.
func WithMetricsInterval(d time.Duration) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		return s.PutPositive(dlq.ErrInvalidOption, nameMetricsInterval, "metrics interval", d)
	})
}

// WithMetricsMaxSeries bounds the (topic, reason) pairs RegisterMetrics
// reports (default 500); the pairs with the most dead
// letters are kept and a warning is logged.
func WithMetricsMaxSeries(n int) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if n <= 0 {
			return fmt.Errorf("%w: metrics max series must be positive, got %d", dlq.ErrInvalidOption, n)
		}
		s.Put(nameMetricsMaxSeries, n)
		return nil
	})
}

type archiveGauges struct {
	a         Archive
	interval  time.Duration
	timeout   time.Duration
	maxSeries int
	log       *slog.Logger
	now       func() time.Time

	mu      sync.Mutex
	fetched time.Time // zero: never
	series  []gaugeSeries
	ok      bool // the last refresh succeeded
}

type gaugeSeries struct {
	attrs  metric.MeasurementOption
	count  int64
	oldest time.Time
}

// RegisterMetrics registers two observable gauges on meter, read
// from a's Stats of the open entries (StateOpen: a replayed, resolved or
// discarded entry leaves them), both with the attributes topic (the
// original topic) and reason:
//
//   - surely.dlq.archived: the number of open dead letters;
//   - surely.dlq.oldest_age: the age in seconds of the oldest of them (by
//     dead-lettering time).
//
// A Prometheus exporter exposes them as surely_dlq_archived and
// surely_dlq_oldest_age_seconds. Each refresh costs 1 + T + P Stats
// queries (T topics, P topic-reason pairs), is bounded by 10 seconds, and
// happens at most once per interval; collections
// in between report the cached values. When a refresh fails, the error is
// logged and no value is reported until one succeeds, so an alert on the
// series' absence catches an archive that cannot be read. Unregister the
// returned registration when done.
//
// It takes WithMetricsInterval, WithMetricsMaxSeries,
// dlq.WithLogger (refresh errors and the series cut; default: discard)
// and dlq.WithClock (the cache and the ages; default time.Now).
//
// Dead letters without an original topic or reason (messages that were
// not envelopes, see Ingest) are reported with an empty label. A Filter
// cannot select an empty field, so their age is that of the oldest entry
// of the wider selection: an upper bound.
//
// An alert that fires when dead letters wait unattended (and stops once a
// replay or a purge took them out of the open state), on the names the
// OpenTelemetry Prometheus exporter gives the two instruments
// (surely_dlq_archived, surely_dlq_oldest_age_seconds; tested):
//
//	groups:
//	  - name: surely-dead-letters
//	    rules:
//	      - alert: SurelyDeadLettersWaiting
//	        expr: max by (topic, reason) (surely_dlq_oldest_age_seconds) > 3600
//	        for: 10m
//	        labels: {severity: page}
//	        annotations:
//	          summary: "{{ $labels.topic }}: dead letters ({{ $labels.reason }}) older than 1h"
//	          description: "Inspect with: surely dlq ls --topic {{ $labels.topic }}; replay or purge (--why)."
//	      - alert: SurelyDeadLettersPilingUp
//	        expr: sum by (topic) (surely_dlq_archived) > 100
//	        for: 15m
//	        labels: {severity: ticket}
//	        annotations:
//	          summary: "{{ $labels.topic }}: {{ $value }} open dead letters"
//	      - alert: SurelyDeadLetterArchiveUnreadable
//	        expr: absent(surely_dlq_archived) and absent(surely_dlq_oldest_age_seconds)
//	        for: 15m
//	        labels: {severity: ticket}
//	        annotations:
//	          summary: "no dead-letter archive metrics (archive unreadable, or empty since start)"
//
// An empty archive reports no series either; the third rule therefore
// also fires for an archive that has stayed empty, which is why it is
// a ticket rather than a page.
func RegisterMetrics(meter metric.Meter, a Archive, opts ...dlq.Option) (metric.Registration, error) {
	if meter == nil || a == nil {
		return nil, fmt.Errorf("%w: archive metrics need a meter and an archive", dlq.ErrInvalidOption)
	}
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(dlq.ErrInvalidOption, "archive.RegisterMetrics", nameMetricsInterval,
		nameMetricsMaxSeries, options.Logger, options.Clock); err != nil {
		return nil, err
	}
	g := &archiveGauges{
		a:         a,
		interval:  options.Get(s, nameMetricsInterval, defaultMetricsInterval),
		timeout:   metricsTimeout,
		maxSeries: options.Get(s, nameMetricsMaxSeries, defaultMetricsMaxSeries),
		log:       options.Get(s, options.Logger, slog.New(slog.DiscardHandler)),
		now:       options.Get(s, options.Clock, time.Now),
	}
	count, err := meter.Int64ObservableGauge(MetricArchived, metric.WithUnit("{message}"),
		metric.WithDescription("Dead letters in the archive, per original topic and reason."))
	if err != nil {
		return nil, fmt.Errorf("archive: %s: %w", MetricArchived, err)
	}
	age, err := meter.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest dead letter in the archive, per original topic and reason."))
	if err != nil {
		return nil, fmt.Errorf("archive: %s: %w", MetricOldestAge, err)
	}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		series, ok := g.snapshot(ctx)
		if !ok {
			return nil
		}
		now := g.now()
		for _, s := range series {
			o.ObserveInt64(count, s.count, s.attrs)
			o.ObserveFloat64(age, max(now.Sub(s.oldest).Seconds(), 0), s.attrs)
		}
		return nil
	}, count, age)
}

// snapshot returns the cached series, refreshing them when the interval
// has passed since the last attempt (failed or not).
func (g *archiveGauges) snapshot(ctx context.Context) ([]gaugeSeries, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !g.fetched.IsZero() && now.Sub(g.fetched) < g.interval {
		return g.series, g.ok
	}
	g.fetched = now
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	series, err := g.query(ctx)
	if err != nil {
		g.log.WarnContext(ctx, "dead-letter archive metrics: stats failed", "error", err)
		g.series, g.ok = nil, false
		return nil, false
	}
	g.series, g.ok = series, true
	return series, true
}

// query reads the count and oldest time of every (topic, reason) pair.
func (g *archiveGauges) query(ctx context.Context) ([]gaugeSeries, error) {
	all, err := g.a.Stats(ctx, Filter{States: openOnly})
	if err != nil {
		return nil, err
	}
	pairs, err := g.pairs(ctx, all)
	if err != nil {
		return nil, err
	}
	sortGaugePairs(pairs)
	if len(pairs) > g.maxSeries {
		g.log.WarnContext(ctx, "dead-letter archive metrics: too many topic/reason pairs, reporting the largest",
			"pairs", len(pairs), "reported", g.maxSeries)
		pairs = pairs[:g.maxSeries]
	}
	out := make([]gaugeSeries, 0, len(pairs))
	for _, p := range pairs {
		oldest, err := g.oldest(ctx, all, p)
		if err != nil {
			return nil, err
		}
		out = append(out, gaugeSeries{
			attrs:  metric.WithAttributeSet(attribute.NewSet(attrTopic.String(p.topic), attrReason.String(p.reason))),
			count:  int64(p.count),
			oldest: oldest,
		})
	}
	return out, nil
}

// gaugePair is the count of one (topic, reason) pair, and its oldest time
// when the topic's Stats already gave it.
type gaugePair struct {
	topic, reason string
	count         int
	oldest        time.Time // zero: not known yet
}

// pairs splits all, the archive's Stats, into (topic, reason) pairs with
// one Stats per topic.
func (g *archiveGauges) pairs(ctx context.Context, all Stats) ([]gaugePair, error) {
	var pairs []gaugePair
	// A Filter cannot select an empty topic: the entries without one are
	// what the topics leave of the total.
	rest := maps.Clone(all.ByReason)
	for topic := range all.ByTopic {
		if topic == "" {
			continue
		}
		st, err := g.a.Stats(ctx, Filter{Topic: topic, States: openOnly})
		if err != nil {
			return nil, err
		}
		for reason, n := range st.ByReason {
			p := gaugePair{topic: topic, reason: reason, count: n}
			if len(st.ByReason) == 1 {
				// The topic's one reason: its Stats is the pair's.
				p.oldest = st.Oldest
			}
			pairs = append(pairs, p)
			rest[reason] -= n
		}
	}
	for reason, n := range rest {
		if n > 0 {
			pairs = append(pairs, gaugePair{topic: "", reason: reason, count: n})
		}
	}
	return pairs, nil
}

// sortGaugePairs orders pairs largest count first, then by topic and
// reason, so that a cut at maxSeries keeps the largest.
func sortGaugePairs(pairs []gaugePair) {
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].count != pairs[j].count {
			return pairs[i].count > pairs[j].count
		}
		if pairs[i].topic != pairs[j].topic {
			return pairs[i].topic < pairs[j].topic
		}
		return pairs[i].reason < pairs[j].reason
	})
}

// oldest returns the oldest time of p: known already, the archive's own
// when it holds a single pair, or read with one more Stats.
func (g *archiveGauges) oldest(ctx context.Context, all Stats, p gaugePair) (time.Time, error) {
	switch {
	case !p.oldest.IsZero():
		return p.oldest, nil
	case len(all.ByTopic) <= 1 && len(all.ByReason) <= 1:
		return all.Oldest, nil
	}
	st, err := g.a.Stats(ctx, Filter{Topic: p.topic, Reason: dlq.Reason(p.reason), States: openOnly})
	if err != nil {
		return time.Time{}, err
	}
	return st.Oldest, nil
}
