package sqlstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// contenders is how many claims of one fresh key race in
// BenchmarkClaimContention.
const contenders = 8

// raceClaims runs n Claims of key at once (released together) and returns
// their results, in no particular order, and the time each took.
func raceClaims(tb testing.TB, s *sqlstore.Store, key string, n int) ([]idempotency.ClaimResult, []time.Duration) {
	tb.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		res   = make([]idempotency.ClaimResult, n)
		took  = make([]time.Duration, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			res[i], errs[i] = s.Claim(context.Background(), idempotency.ClaimRequest{
				Namespace: "ns", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 3,
			})
			took[i] = time.Since(t0)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(tb, errs[i], "claim %d", i)
	}
	return res, took
}

// BenchmarkClaimContention: rounds of 8 concurrent Claims of one fresh
// key, on a warm pool of 8 connections with the statements prepared on
// each, and a Claim of a fresh key alone before each round. It reports
// the median and 99th percentile latency over the rounds of the claim
// alone (solo), of the round's winner and of its 7 losers, in ms.
//
//	go test -run '^$' -bench BenchmarkClaimContention -benchtime 200x ./idempotency/sqlstore/
func BenchmarkClaimContention(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			db := be.open(b)
			db.SetMaxOpenConns(contenders)
			db.SetMaxIdleConns(contenders)
			s := newStore(b, db, be.dialect)
			// Every connection opened, every statement prepared on each.
			for range 3 {
				raceClaims(b, s, "warm-"+randomHex(4), contenders)
			}
			var solo, winners, losers []time.Duration
			for b.Loop() {
				_, took := raceClaims(b, s, "solo-"+randomHex(8), 1)
				solo = append(solo, took[0])
				results, took := raceClaims(b, s, "k-"+randomHex(8), contenders)
				for i, res := range results {
					if res.Status == idempotency.Acquired {
						winners = append(winners, took[i])
					} else {
						losers = append(losers, took[i])
					}
				}
			}
			report := func(name string, ds []time.Duration) {
				slices.Sort(ds)
				b.ReportMetric(msOf(ds[len(ds)/2]), name+"_p50_ms")
				b.ReportMetric(msOf(ds[len(ds)*99/100]), name+"_p99_ms")
			}
			report("solo", solo)
			report("winner", winners)
			report("loser", losers)
			b.ReportMetric(0, "ns/op") // a round's time is not the figure
		})
	}
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
