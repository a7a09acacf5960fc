package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Network faults (-net): every consumer reaches the store, the broker and
// the effects database through proxies of its own (toxiproxy, run in this
// process on loopback ports), so that one consumer can be cut off from
// one of them while the others, and its other links, work on.

// Links of a consumer.
const (
	linkStore   = "store"
	linkBroker  = "broker"
	linkEffects = "effects"
	// linkReplica is the link to the replica with -failover: a store link
	// too, since Sentinel may make it the primary.
	linkReplica = "store-replica"
)

// Network faults, as counted in the result line.
const (
	netLatency         = "latency"          // 50-500 ms ± jitter on one link of one consumer
	netTimeout         = "timeout"          // one link silent past the store timeout, then closed
	netReset           = "reset"            // connections of one link reset (TCP RST) as they send
	netBandwidth       = "bandwidth"        // one link throttled to a few KB/s
	netPartitionStore  = "partition_store"  // one consumer cut off from the store, broker reachable
	netPartitionBroker = "partition_broker" // one consumer cut off from the broker, store reachable
	netSlowStore       = "slow_store"       // every consumer's store calls delayed past the lease-extension interval
)

var netKinds = []string{netLatency, netTimeout, netReset, netBandwidth, netPartitionStore, netPartitionBroker, netSlowStore}

// Bounds of the network faults.
const (
	netGapMin, netGapMax = 500 * time.Millisecond, 2500 * time.Millisecond // between two faults
	netHoldMin           = time.Second
	netHoldMax           = 4 * time.Second
	// slowStoreDelay is past the lease-extension interval (lease/3) and
	// below the lease: extensions arrive late but in time, or the lease
	// is given up.
	slowStoreDelay  = time.Second // lease/3 < this < lease
	slowStoreJitter = 200 * time.Millisecond
	slowStoreHold   = 2 * lease
)

// proxies is the toxiproxy server of a run: the proxies of every consumer.
type proxies struct {
	server *toxiproxy.ApiServer
	mu     sync.Mutex
	seq    int
}

func newProxies() *proxies {
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxiproxy logs through zerolog's global logger too
	return &proxies{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// linkSet is one consumer's proxies, by link.
type linkSet struct {
	id    int
	links map[string]*toxiproxy.Proxy
}

// newLinkSet starts a proxy, on a free loopback port, to each upstream
// address (host:port) given by link; an empty address is left direct.
func (p *proxies) newLinkSet(upstreams map[string]string) (*linkSet, error) {
	p.mu.Lock()
	p.seq++
	id := p.seq
	p.mu.Unlock()
	ls := &linkSet{id: id, links: map[string]*toxiproxy.Proxy{}}
	for link, up := range upstreams {
		if up == "" {
			continue
		}
		px := toxiproxy.NewProxy(p.server, fmt.Sprintf("c%d-%s", id, link), "127.0.0.1:0", up)
		if err := px.Start(); err != nil {
			ls.close()
			return nil, fmt.Errorf("proxy to %s: %w", up, err)
		}
		ls.links[link] = px
	}
	return ls, nil
}

// addr is the address a consumer dials for link, or "" when it is direct.
func (ls *linkSet) addr(link string) string {
	if px, ok := ls.links[link]; ok {
		return px.Listen
	}
	return ""
}

func (ls *linkSet) close() {
	for _, px := range ls.links {
		px.Stop()
	}
}

// toxic adds a toxic to both directions of link; remove takes it off again
// (a timeout toxic closes the connections it held when it is removed).
func (ls *linkSet) toxic(link, name, kind string, attrs map[string]int64) error {
	px, ok := ls.links[link]
	if !ok {
		return fmt.Errorf("no proxy for link %s", link)
	}
	for _, dir := range []string{"upstream", "downstream"} {
		var b strings.Builder
		fmt.Fprintf(&b, `{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{`, name+"_"+dir, kind, dir)
		keys := make([]string, 0, len(attrs))
		for k := range attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%d", k, attrs[k])
		}
		b.WriteString("}}")
		if _, err := px.Toxics.AddToxicJson(strings.NewReader(b.String())); err != nil {
			return fmt.Errorf("toxic %s on %s: %w", name, px.Name, err)
		}
	}
	return nil
}

func (ls *linkSet) remove(link, name string) {
	px, ok := ls.links[link]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dir := range []string{"upstream", "downstream"} {
		_ = px.Toxics.RemoveToxic(ctx, name+"_"+dir) // gone with a stopped proxy: nothing to remove
	}
}

// hostPort returns the host:port of a URL (amqp://, nats://, redis://,
// postgres://).
func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return "", fmt.Errorf("%q: no host:port: %w", raw, err)
	}
	return u.Host, nil
}

// withHost returns raw with its host:port replaced by addr.
func withHost(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

// netChaos injects network faults at random times until stopped.
type netChaos struct {
	f          *faults
	storeLinks []string // the links carrying store calls (effects in inbox mode: one database; primary and replica with -failover)
	storeDelay time.Duration
	mu         sync.Mutex
	counts     map[string]int
	deck       []string // kinds still to deal
	seq        int      // names the toxics
}

// netLanes is how many faults may be under way at once.
const netLanes = 2

// loop injects faults from netLanes lanes, one at a time in each, with
// random gaps, until ctx ends. Kinds are dealt from a shuffled deck of all
// of them, so that even a short run gets every kind.
func (n *netChaos) loop(ctx context.Context) {
	var wg sync.WaitGroup
	for range netLanes {
		wg.Go(func() {
			for {
				gap := netGapMin + time.Duration(n.f.intn(int(netGapMax-netGapMin)))
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap):
				}
				n.inject(ctx, n.deal())
			}
		})
	}
	wg.Wait()
}

// deal returns the next kind of the deck, shuffling a new deck when it is
// empty.
func (n *netChaos) deal() string {
	n.mu.Lock()
	empty := len(n.deck) == 0
	n.mu.Unlock()
	var fresh []string
	if empty {
		fresh = slices.Clone(netKinds)
		for i := len(fresh) - 1; i > 0; i-- {
			j := n.f.intn(i + 1)
			fresh[i], fresh[j] = fresh[j], fresh[i]
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.deck) == 0 {
		n.deck = fresh
	}
	k := n.deck[0]
	n.deck = n.deck[1:]
	return k
}

// inject applies one fault of kind and takes it off again after its time.
func (n *netChaos) inject(ctx context.Context, kind string) {
	hold := netHoldMin + time.Duration(n.f.intn(int(netHoldMax-netHoldMin)))
	type target struct {
		ls   *linkSet
		link string
	}
	var (
		targets []target
		toxic   string
		attrs   map[string]int64
		what    string
	)
	pick := func() (*child, *linkSet) {
		c := n.f.cs.pickNet(n.f.intn(1 << 20))
		if c == nil {
			return nil, nil
		}
		return c, c.net
	}
	storeTargets := func(ls *linkSet) []target {
		var out []target
		for _, l := range n.storeLinks {
			if _, ok := ls.links[l]; ok {
				out = append(out, target{ls, l})
			}
		}
		return out
	}
	anyLink := func(ls *linkSet) string {
		links := make([]string, 0, len(ls.links))
		for l := range ls.links {
			links = append(links, l)
		}
		sort.Strings(links)
		return links[n.f.intn(len(links))]
	}
	switch kind {
	case netLatency, netReset, netBandwidth, netTimeout:
		c, ls := pick()
		if ls == nil || len(ls.links) == 0 {
			return
		}
		link := anyLink(ls)
		targets = []target{{ls, link}}
		if kind == netTimeout {
			if st := storeTargets(ls); len(st) > 0 {
				targets, link = st, linkStore
			}
			hold = n.storeDelay + 500*time.Millisecond // past the store timeout
		}
		switch kind {
		case netLatency:
			lat := 50 + int64(n.f.intn(451))
			toxic, attrs = "latency", map[string]int64{"latency": lat / 2, "jitter": lat / 4}
			what = fmt.Sprintf("%d ms ± %d on %s of consumer %d", lat, lat/2, link, c.pid)
		case netReset:
			toxic, attrs = "reset_peer", map[string]int64{"timeout": int64(n.f.intn(200))}
			what = fmt.Sprintf("connections of %s of consumer %d reset", link, c.pid)
		case netBandwidth:
			rate := 1 + int64(n.f.intn(16))
			toxic, attrs = "bandwidth", map[string]int64{"rate": rate}
			what = fmt.Sprintf("%s of consumer %d at %d KB/s", link, c.pid, rate)
		case netTimeout:
			toxic, attrs = "timeout", map[string]int64{"timeout": 0}
			what = fmt.Sprintf("%s of consumer %d silent past the store timeout", link, c.pid)
		}
	case netPartitionStore, netPartitionBroker:
		c, ls := pick()
		if ls == nil {
			return
		}
		link, other := linkStore, linkBroker
		targets = storeTargets(ls)
		if kind == netPartitionBroker {
			link, other = linkBroker, linkStore
			targets = nil
			if _, ok := ls.links[linkBroker]; ok {
				targets = []target{{ls, linkBroker}}
			}
		}
		if len(targets) == 0 {
			return
		}
		hold += time.Duration(n.f.intn(int(2 * time.Second)))
		toxic, attrs = "timeout", map[string]int64{"timeout": 0}
		what = fmt.Sprintf("consumer %d cut off from the %s, %s reachable", c.pid, link, other)
	case netSlowStore:
		for _, ls := range n.f.cs.allNet() {
			targets = append(targets, storeTargets(ls)...)
		}
		if len(targets) == 0 {
			return
		}
		hold = slowStoreHold
		toxic = "latency"
		// Both directions: a round trip of a store call takes twice this.
		attrs = map[string]int64{"latency": (slowStoreDelay / 2).Milliseconds(), "jitter": (slowStoreJitter / 2).Milliseconds()}
		what = fmt.Sprintf("every store call through %d links delayed %v ± %v (lease extended every %v)", len(targets), slowStoreDelay, slowStoreJitter, (lease / 3).Round(time.Millisecond))
	}
	n.mu.Lock()
	n.seq++
	name := fmt.Sprintf("%s%d", kind, n.seq)
	n.mu.Unlock()
	var applied []target
	for _, t := range targets {
		if err := t.ls.toxic(t.link, name, toxic, attrs); err != nil {
			n.f.log.say("net: %v", err) // the consumer's proxies stopped meanwhile (a kill)
			continue
		}
		applied = append(applied, t)
	}
	if len(applied) == 0 {
		return
	}
	n.mu.Lock()
	n.counts[kind]++
	k := n.counts[kind]
	n.mu.Unlock()
	n.f.log.say("net %s %d: %s, for %v", kind, k, what, hold.Round(10*time.Millisecond))
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	for _, t := range applied {
		t.ls.remove(t.link, name)
	}
}

// summary is the counts in the order of netKinds, as key=value pairs.
func (n *netChaos) summary() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for _, k := range netKinds {
		out[k] = n.counts[k]
	}
	return out
}

// dropDown drops everything link sends downstream (to the consumer) until
// remove, which closes its connections.
func (ls *linkSet) dropDown(link, name string) error {
	px, ok := ls.links[link]
	if !ok {
		return fmt.Errorf("no proxy for link %s", link)
	}
	body := fmt.Sprintf(`{"name":%q,"type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`, name+"_downstream")
	if _, err := px.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("toxic %s on %s: %w", name, px.Name, err)
	}
	return nil
}
