package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store failover (-failover, lease mode): a Redis primary, one replica and
// three Sentinels, all started by this program on loopback ports. The
// replica replicates through a proxy of the run, so that the failover can
// come while it lags: the stream from the primary to its replica is
// dropped for replicationLag, then the primary is killed (SIGKILL),
// Sentinel promotes the replica, and the writes the primary acknowledged
// in that time are lost. The run
// then checks the record of every acknowledged operation.

// Sentinel settings.
const (
	sentinelMaster    = "surely-chaos"
	sentinelCount     = 3
	sentinelQuorum    = 2
	sentinelDownAfter = time.Second
	failoverBound     = 60 * time.Second // Sentinel promotes the replica
	replicationLag    = time.Second      // the primary's writes its replica never gets, before the kill
)

// redisHA is the primary, the replica and the Sentinels.
type redisHA struct {
	primary, replica *redisServer
	sentinels        []*redisServer
	replLink         *linkSet // the replica's link to the first primary
	dir              string
}

func (h *redisHA) sentinelAddrs() []string {
	out := make([]string, len(h.sentinels))
	for i, s := range h.sentinels {
		out[i] = s.addr
	}
	return out
}

// startRedisHA starts the servers in dir and waits until the Sentinels
// know the replica and each other.
func startRedisHA(ctx context.Context, dir string, px *proxies) (*redisHA, error) {
	h := &redisHA{dir: dir}
	ok := false
	defer func() {
		if !ok {
			h.stop()
		}
	}()
	var err error
	for _, d := range []string{"primary", "replica", "sentinels"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if h.primary, err = startRedisServer(filepath.Join(dir, "primary")); err != nil {
		return nil, err
	}
	if h.replLink, err = px.newLinkSet(map[string]string{linkStore: h.primary.addr}); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(h.replLink.addr(linkStore))
	if h.replica, err = startRedisServer(filepath.Join(dir, "replica"), "--replicaof", host, port); err != nil {
		return nil, err
	}
	phost, pport, _ := net.SplitHostPort(h.primary.addr)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedisServer
	}
	for i := range sentinelCount {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "sentinels", fmt.Sprintf("sentinel-%d.conf", i))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			port, filepath.Join(dir, "sentinels"), filepath.Join(dir, "sentinels", fmt.Sprintf("sentinel-%d.log", i)),
			sentinelMaster, phost, pport, sentinelQuorum, sentinelMaster, sentinelDownAfter.Milliseconds(),
			sentinelMaster, sentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, args: []string{conf, "--sentinel"}}
		if err := s.start(); err != nil {
			return nil, fmt.Errorf("sentinel: %w", err)
		}
		h.sentinels = append(h.sentinels, s)
	}
	// Wait until every Sentinel sees the replica and the other Sentinels.
	deadline := time.Now().Add(failoverBound)
	for {
		ready := 0
		for _, s := range h.sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr})
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			reps, err1 := sc.Replicas(cctx, sentinelMaster).Result()
			sens, err2 := sc.Sentinels(cctx, sentinelMaster).Result()
			cancel()
			_ = sc.Close()
			if err1 == nil && err2 == nil && len(reps) >= 1 && len(sens) >= sentinelCount-1 {
				ready++
			}
		}
		if ready == sentinelCount {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the Sentinels did not discover the replica and each other within %v", failoverBound)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ok = true
	return h, nil
}

// masterAddr asks the Sentinels for the current primary.
func (h *redisHA) masterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, s := range h.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr})
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		a, err := sc.GetMasterAddrByName(cctx, sentinelMaster).Result()
		cancel()
		_ = sc.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no Sentinel named the primary: %w", errors.Join(errs...))
}

// failover slows the replication link, kills the primary, waits for the
// Sentinels to promote the replica and starts the old primary again (the
// Sentinels make it a replica of the new one). It returns the time from
// the kill to the promotion.
func (h *redisHA) failover(ctx context.Context) (time.Duration, string, error) {
	old, err := h.masterAddr(ctx)
	if err != nil {
		return 0, "", err
	}
	var victim *redisServer
	for _, s := range []*redisServer{h.primary, h.replica} {
		if s.addr == old {
			victim = s
		}
	}
	if victim == nil {
		return 0, "", fmt.Errorf("primary %s is none of the run's servers", old)
	}
	const lagToxic = "replication_lag"
	lagged := victim == h.primary && h.replLink.links[linkStore] != nil
	if lagged {
		// Downstream only: the primary's stream to its replica is dropped
		// (its replies to the replica's acknowledgements too).
		if err := h.replLink.dropDown(linkStore, lagToxic); err != nil {
			return 0, "", err
		}
		time.Sleep(replicationLag)
	}
	behind := replicationBehind(ctx, victim.addr)
	killed := time.Now()
	victim.stop()
	if lagged {
		h.replLink.remove(linkStore, lagToxic)
	}
	for {
		now, err := h.masterAddr(ctx)
		if err == nil && now != old {
			break
		}
		if time.Since(killed) > failoverBound || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("the Sentinels still name %s", now)
			}
			return 0, behind, fmt.Errorf("no replica promoted within %v of killing the primary %s: %w", failoverBound, old, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(killed)
	if err := victim.start(); err != nil {
		return took, behind, fmt.Errorf("start the old primary again: %w", err)
	}
	return took, behind, nil
}

// replicationBehind tells, from the primary's INFO replication, how far
// its replicas' acknowledged offsets are behind its own, just before the
// kill.
func replicationBehind(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := c.Info(cctx, "replication").Result()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	var own int64
	var parts []string
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
			own, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "slave") || !strings.Contains(l, "offset=") {
			continue
		}
		for _, kv := range strings.Split(l[strings.Index(l, ":")+1:], ",") {
			if v, ok := strings.CutPrefix(kv, "offset="); ok {
				off, _ := strconv.ParseInt(v, 10, 64)
				parts = append(parts, fmt.Sprintf("%d bytes", own-off))
			}
		}
	}
	if len(parts) == 0 {
		return "no replica connected"
	}
	return strings.Join(parts, ", ")
}

func (h *redisHA) stop() {
	for _, s := range h.sentinels {
		s.stop()
	}
	if h.replica != nil {
		h.replica.stop()
	}
	if h.primary != nil {
		h.primary.stop()
	}
	if h.replLink != nil {
		h.replLink.close()
	}
}
