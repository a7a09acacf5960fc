package sqlstore_test

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/internal/sqlcount"
)

// contenders is how many claims of one fresh key race in the contention
// test and benchmark.
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

// Concurrent claims of one new key: one wins; every other one answers
// InProgress with the winner's lease, without an error and without a
// transaction (the INSERT that finds the winner's row, then one read of
// the committed row: no row lock, so the losers do not queue behind each
// other); the record counts one attempt.
func TestConcurrentClaimsOfANewKey(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		var c sqlcount.Counter
		db := countedDB(t, b, &c)
		db.SetMaxOpenConns(contenders)
		s := newStore(t, db, b.dialect)
		raceClaims(t, s, "warm-up", contenders) // prepares the statements
		for round := range 3 {
			key := "k-" + randomHex(8)
			before := c.Snapshot()
			results, _ := raceClaims(t, s, key, contenders)
			got := c.Snapshot().Sub(before)

			var winner idempotency.Lease
			for _, res := range results {
				if res.Status == idempotency.Acquired {
					require.Empty(t, winner.Token, "round %d: two claims acquired", round)
					winner = res.Lease
				}
			}
			require.NotEmpty(t, winner.Token, "round %d: no claim acquired", round)
			for i, res := range results {
				if res.Lease.Token == winner.Token {
					continue
				}
				require.Equal(t, idempotency.InProgress, res.Status, "round %d, claim %d", round, i)
				require.True(t, res.Until.Equal(winner.Until), "round %d, claim %d: the winner's lease, %v, not %v", round, i, winner.Until, res.Until)
				require.Positive(t, res.Wait, "round %d, claim %d", round, i)
			}
			rec, err := s.Get(t.Context(), "ns", key)
			require.NoError(t, err)
			require.Equal(t, 1, rec.Attempts, "round %d: one attempt counted", round)
			require.Len(t, rec.History, 1, "round %d", round)
			require.Equal(t, winner.Token, rec.Token, "round %d", round)

			require.Zero(t, got.Begins, "round %d: a loser takes no transaction: %+v", round, got)
			require.EqualValues(t, 1+2*(contenders-1), got.Statements(),
				"round %d: the winner's INSERT, and each loser's INSERT and read: %+v", round, got)
		}
	})
}

// A claim that changes nothing (a live lease, a DONE record) does not wait
// for a row lock that another transaction holds without having updated
// the row (SELECT ... FOR UPDATE), on PostgreSQL: it answers from the
// committed row, both Claim and the claim the inbox makes in its one
// transaction (WithInTxClaims, a first delivery from a counting broker).
// Before, it took that lock itself, in a transaction, so the losers of a
// race for a new key queued behind each other's locks and commits. (An
// uncommitted update of the row, an inbox transaction's, holds up the
// claim's INSERT anyway; on MySQL that INSERT ... ON DUPLICATE KEY UPDATE
// takes the row lock by design, see the package doc, and on SQLite it
// needs the database's write lock.)
func TestClaimRefusalTakesNoRowLock(t *testing.T) {
	b := postgresBackend
	db := b.open(t)
	s := newStore(t, db, b.dialect)
	ctx := t.Context()
	const fp = "fp"
	req := idempotency.ClaimRequest{Namespace: inboxNS, Key: "k", Fingerprint: fp, Lease: time.Minute, MaxAttempts: 3}
	owner, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, owner.Status)

	// holdRow runs fn while another transaction holds the record's row.
	holdRow := func(fn func(ctx context.Context)) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback()) }()
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT attempts FROM "+quote(b.dialect, sqlstore.Table(s))+
			" WHERE namespace = $1 AND op_key = $2 FOR UPDATE", req.Namespace, req.Key).Scan(&n))
		// The bound of a claim that would wait for the lock: a failure,
		// not a measure.
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		fn(bounded)
	}
	claim := func(ctx context.Context) idempotency.ClaimResult {
		res, err := s.Claim(ctx, req)
		require.NoError(t, err, "the claim waited for the row lock")
		return res
	}
	// inboxClaim is a first delivery from a counting broker, claimed in
	// the inbox's transaction (see runDeferred).
	inboxClaim := func(ctx context.Context) idempotency.ClaimResult {
		op := &opctx.Op{Operation: idempotency.Operation{Namespace: inboxNS, Key: req.Key, Fingerprint: fp}, InTx: opctx.NewInTxClaims(s)}
		dc := &opctx.DeferredClaim{Request: req}
		op.Deferred = dc
		ran := false
		_, err := s.Inbox(func(context.Context, *sql.Tx, *message.Message) ([]*message.Message, error) {
			ran = true
			return nil, nil
		})(operationMsg(ctx, op, "pay 10"))
		require.NoError(t, err, "the inbox's claim waited for the row lock")
		require.True(t, dc.Made)
		require.False(t, ran, "the handler ran for a claim not acquired")
		return dc.Result
	}

	for name, fn := range map[string]func(context.Context) idempotency.ClaimResult{"Claim": claim, "inbox": inboxClaim} {
		holdRow(func(ctx context.Context) {
			res := fn(ctx)
			require.Equal(t, idempotency.InProgress, res.Status, name)
			require.True(t, res.Until.Equal(owner.Lease.Until), name)
		})
	}
	require.NoError(t, s.Complete(ctx, owner.Lease, idempotency.Outcome{}))
	for name, fn := range map[string]func(context.Context) idempotency.ClaimResult{"Claim": claim, "inbox": inboxClaim} {
		holdRow(func(ctx context.Context) {
			require.Equal(t, idempotency.Completed, fn(ctx).Status, name)
		})
	}
	rec, err := s.Get(ctx, req.Namespace, req.Key)
	require.NoError(t, err)
	require.Equal(t, 1, rec.Attempts, "no claim counted an attempt")
}

// BenchmarkClaimContention: rounds of 8 concurrent Claims of one fresh
// key, and a Claim of a fresh key alone before each round. It reports the
// median and 99th percentile latency over the rounds of the claim alone
// (solo), of the round's winner and of its 7 losers, in ms.
//
// idle=8 is a warm pool: 8 connections kept idle, the statements prepared
// on each. idle=2 is database/sql's default MaxIdleConns: after each
// round the pool closes all but 2 of its 8 connections, so each round
// opens 6 new ones (PostgreSQL forks a backend for each) and prepares the
// store's statements on them again; run it with fewer rounds.
//
//	go test -run '^$' -bench 'BenchmarkClaimContention/.*/idle=8' -benchtime 200x ./idempotency/sqlstore/
//	go test -run '^$' -bench 'BenchmarkClaimContention/.*/idle=2' -benchtime 30x ./idempotency/sqlstore/
func BenchmarkClaimContention(b *testing.B) {
	for _, be := range backends {
		for _, idle := range []int{contenders, 2} {
			b.Run(be.name+"/idle="+strconv.Itoa(idle), func(b *testing.B) {
				db := be.open(b)
				db.SetMaxOpenConns(contenders)
				db.SetMaxIdleConns(idle)
				s := newStore(b, db, be.dialect)
				for range 3 { // every statement prepared (on each connection, when kept)
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
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
