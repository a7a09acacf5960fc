package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/surely-dev/surely/idempotency"
)

// soakFlat is how much a consumer's resident memory or goroutine count may
// grow between the first window after warm-up and the last one.
const soakFlat = 0.10

// soakGoroutineSlack: a consumer runs a few dozen goroutines, and their
// number moves with the messages in flight and the connections being
// dialed again after a network fault; growth in goroutines fails the soak
// only when it is past soakFlat and past this many goroutines too.
const soakGoroutineSlack = 4

// netLinks returns, for the consumers' configuration base, what makes the
// proxies of each new consumer and its configuration pointing at them, and
// the link that carries the store calls: in inbox mode the store is the
// effects database.
func netLinks(base childConfig, ha *redisHA) (func(px *proxies) func() (string, *linkSet, error), []string, error) {
	up := map[string]string{}
	var err error
	if up[linkBroker], err = hostPort(base.BrokerURL); err != nil {
		return nil, nil, fmt.Errorf("broker URL: %w", err)
	}
	if base.Effects == effectsPostgres {
		if up[linkEffects], err = hostPort(base.EffectsDSN); err != nil {
			return nil, nil, fmt.Errorf("effects database URL: %w", err)
		}
	}
	storeLinks := []string{linkStore}
	switch {
	case ha != nil:
		// The consumers dial the address the Sentinels name through
		// these proxies (childConfig.StoreDial).
		up[linkStore], up[linkReplica] = ha.primary.addr, ha.replica.addr
		storeLinks = append(storeLinks, linkReplica)
	case base.Mode == modeLease:
		up[linkStore] = base.StoreRedis
	default:
		storeLinks = []string{linkEffects}
	}
	return func(px *proxies) func() (string, *linkSet, error) {
		return func() (string, *linkSet, error) {
			ls, err := px.newLinkSet(up)
			if err != nil {
				return "", nil, err
			}
			cfg := base
			if a := ls.addr(linkBroker); a != "" {
				if cfg.BrokerURL, err = withHost(cfg.BrokerURL, a); err != nil {
					ls.close()
					return "", nil, err
				}
			}
			if a := ls.addr(linkEffects); a != "" {
				if cfg.EffectsDSN, err = withHost(cfg.EffectsDSN, a); err != nil {
					ls.close()
					return "", nil, err
				}
			}
			switch {
			case ha != nil:
				cfg.StoreDial = map[string]string{ha.primary.addr: ls.addr(linkStore), ha.replica.addr: ls.addr(linkReplica)}
			case ls.addr(linkStore) != "":
				cfg.StoreRedis = ls.addr(linkStore)
			}
			raw, err := json.Marshal(cfg)
			if err != nil {
				ls.close()
				return "", nil, err
			}
			return string(raw), ls, nil
		}
	}, storeLinks, nil
}

// linkNames names what the consumers reach through proxies.
func linkNames(base childConfig) []string {
	out := []string{"the broker"}
	switch {
	case base.Mode == modeInbox && base.Effects == effectsPostgres:
		out = append(out, "the store and effects database (PostgreSQL)")
	case base.Mode == modeLease && len(base.StoreSentinels) > 0:
		out = append(out, "the store (Redis primary and replica, not the Sentinels)")
	case base.Mode == modeLease:
		out = append(out, "the store (Redis)")
	}
	if base.Mode == modeLease && base.Effects == effectsPostgres {
		out = append(out, "the effects database (PostgreSQL)")
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkAcked reads, after the run, the record of every operation a
// consumer acknowledged (its Complete returned nil): each must be DONE with
// that attempt's token. One that is not was lost by the store: it ran again
// under another token (lostRerun) or its record is just gone
// (lostForgotten: a redelivery would run it again).
func checkAcked(ctx context.Context, res *result, getter recordGetter, ns string, rep *reports, db *effectsDB, log *logger) error {
	acked := rep.ackedTokens()
	counts, err := db.effectCounts(ctx)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var (
		lost          []string
		first, latest time.Duration = -1, 0
	)
	for _, k := range keys {
		rec, err := getter.Get(ctx, ns, k)
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("read the record of %s: %w", k, err)
		}
		for _, tok := range acked[k] {
			res.ackedChecked++
			if err == nil && rec.State == idempotency.StateDone && rec.Token == tok {
				continue
			}
			if err == nil && rec.State == idempotency.StateDone && slices.Contains(acked[k], rec.Token) {
				continue // two Completes acknowledged: the later one's record stands
			}
			res.ackedLost++
			state := "no record"
			if err == nil {
				state = fmt.Sprintf("%s with token %s", rec.State, rec.Token)
			}
			if counts[k] > 1 {
				res.lostRerun++
			} else {
				res.lostForgotten++
			}
			lost = append(lost, fmt.Sprintf("%s (acked token %s, now %s, %d effects)", k, tok, state, counts[k]))
			at := rep.ackedWhen(k, tok)
			if first < 0 || at < first {
				first = at
			}
			latest = max(latest, at)
		}
	}
	log.say("acknowledged completions: %d checked after the run, %d lost by the store (%d ran again, %d forgotten)",
		res.ackedChecked, res.ackedLost, res.lostRerun, res.lostForgotten)
	if len(lost) > 0 {
		log.say("lost acknowledged completions, acknowledged between %v and %v after the start: %s",
			first.Round(10*time.Millisecond), latest.Round(10*time.Millisecond), strings.Join(lost[:min(len(lost), 10)], ", "))
	}
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, idempotency.ErrNotFound) }

// soakFigures fills res with the soak's flatness figures, logs every
// consumer's, and writes the plot.
func soakFigures(res *result, rep *reports, cfg config, took time.Duration, log *logger) {
	warm := max(cfg.duration/5, 30*time.Second)
	window := max(cfg.duration/10, 20*time.Second)
	end := min(took, cfg.duration)
	if warm+2*window > end {
		warm, window = end/4, end/4
	}
	res.growth = rep.flatness(warm, window, end)
	for _, g := range res.growth {
		res.rssGrowthMax = math.Max(res.rssGrowthMax, g.rssGrowth)
		res.goroutGrowMax = math.Max(res.goroutGrowMax, g.goroutGrowth)
		res.goroutGrowAbs = math.Max(res.goroutGrowAbs, g.goroutTo-g.goroutFrom)
		log.say("soak: consumer %d: resident %.1f -> %.1f MiB (%+.1f %%), goroutines %.0f -> %.0f (%+.1f %%), %d samples; windows [%v, %v) and the last %v",
			g.pid, g.rssFrom/1024, g.rssTo/1024, 100*g.rssGrowth, g.goroutFrom, g.goroutTo, 100*g.goroutGrowth, g.samples,
			warm, warm+window, window)
	}
	if cfg.plot != "" {
		if err := os.WriteFile(cfg.plot, []byte(plotSVG(rep.allSeries(), warm)), 0o644); err != nil { //nolint:gosec // a plot to share
			log.say("soak: plot: %v", err)
		} else {
			log.say("soak: plot written to %s", cfg.plot)
		}
	}
}

// plotSVG draws every consumer's resident memory (top) and goroutines
// (bottom) over time.
func plotSVG(series map[int][]sample, warm time.Duration) string {
	const (
		w, h         = 900, 560
		left, right  = 70, 20
		top, gap     = 30, 60
		panelH       = 210
		plotW        = w - left - right
		secondsTicks = 6
	)
	pids := make([]int, 0, len(series))
	var tMax float64
	var rssMax, gMax float64
	for pid, s := range series {
		pids = append(pids, pid)
		for _, x := range s {
			tMax = math.Max(tMax, x.at.Seconds())
			rssMax = math.Max(rssMax, float64(x.rssKiB)/1024)
			gMax = math.Max(gMax, float64(x.goroutines))
		}
	}
	slices.Sort(pids)
	if tMax == 0 {
		tMax = 1
	}
	rssMax, gMax = niceCeil(rssMax), niceCeil(gMax)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	panel := func(y0 int, title string, yMax float64, val func(sample) float64) {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, y0-8, title)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		for i := 0; i <= 4; i++ {
			y := float64(y0) + float64(panelH)*(1-float64(i)/4)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
				left, y, left+plotW, y, left-6, y+4, yMax*float64(i)/4)
		}
		for i := 0; i <= secondsTicks; i++ {
			x := float64(left) + float64(plotW)*float64(i)/secondsTicks
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, y0+panelH+16,
				(time.Duration(tMax*float64(i)/secondsTicks) * time.Second).Round(time.Second))
		}
		wx := float64(left) + float64(plotW)*warm.Seconds()/tMax
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#aaa" stroke-dasharray="4 3"/>`+"\n", wx, y0, wx, y0+panelH)
		for i, pid := range pids {
			var pts []string
			for _, x := range series[pid] {
				px := float64(left) + float64(plotW)*x.at.Seconds()/tMax
				py := float64(y0) + float64(panelH)*(1-val(x)/yMax)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colors[i%len(colors)], strings.Join(pts, " "))
		}
	}
	panel(top, "resident memory (MiB) of each consumer", rssMax, func(s sample) float64 { return float64(s.rssKiB) / 1024 })
	panel(top+panelH+gap, "goroutines of each consumer", gMax, func(s sample) float64 { return float64(s.goroutines) })
	for i, pid := range pids {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">consumer %d</text>`+"\n", left+i*120, h-12, colors[i%len(colors)], pid)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#777">dashed: end of warm-up</text>`+"\n", w-right-150, h-12)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
