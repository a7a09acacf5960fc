package replay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// completeAs leaves the record of key in namespace reserve DONE with
// fingerprint fp, completed now on the store's clock.
func completeAs(t *testing.T, st idempotency.Store, key, fp string) {
	t.Helper()
	ctx := context.Background()
	res, err := st.Claim(ctx, idempotency.ClaimRequest{Namespace: "reserve", Key: key, Fingerprint: fp, Lease: time.Minute, MaxAttempts: 9})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, st.Complete(ctx, res.Lease, idempotency.Outcome{}))
}

// claimingConsumer is a consumer stand-in on st: it claims each replayed
// message with fingerprint "fp" (the entries' payload), completes it when
// it acquires, and dead-letters it again (reason conflict) when the key is
// held by another payload.
func claimingConsumer(t *testing.T, a archive.Archive, st idempotency.Store) func(p published) error {
	return func(p published) error {
		key := p.msg.Metadata.Get(idempotency.DefaultMetadataKey)
		res, err := st.Claim(context.Background(), idempotency.ClaimRequest{Namespace: "reserve", Key: key, Fingerprint: "fp",
			Lease: time.Minute, MaxAttempts: 9, Reopen: p.msg.Metadata.Get(dlq.KeyReplayID)})
		require.NoError(t, err)
		switch res.Status {
		case idempotency.Acquired:
			return st.Complete(context.Background(), res.Lease, idempotency.Outcome{})
		case idempotency.Conflict:
			env := dlq.Wrap(p.msg, dlq.Failure{
				Reason: dlq.ReasonConflict, Err: errors.New("key held by another payload"), Topic: p.topic,
				OperationKey: key, Fingerprint: "fp", Namespace: "reserve", Retention: time.Hour, At: p.at,
			}, nil, "host-1", "group-1")
			require.NoError(t, a.Publish("dead-letters", env))
			return nil
		}
		return fmt.Errorf("unexpected claim: %v", res.Status)
	}
}

// A DONE record resolves a replayed entry only when it is the replayed
// operation's: the DONE of a conflict's key is the other payload's,
// written before the replay, and a DONE of the same payload completed
// before the replay was not the replay's doing either. Neither the run
// nor Reconcile marks such an entry resolved, with or without a consumer.
func TestDoneOfAnotherAttemptDoesNotResolve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		reason   dlq.Reason
		fp       string        // of the DONE record written before the replay
		age      time.Duration // how long before the replay it was completed
		consumer bool
		refailed int
	}{
		{name: "conflict", reason: dlq.ReasonConflict, fp: "other", age: time.Hour},
		// Within the minute allowed for clock skew: the fingerprint tells.
		{name: "conflict done just before", reason: dlq.ReasonConflict, fp: "other", age: time.Second},
		{name: "conflict with a consumer", reason: dlq.ReasonConflict, fp: "other", age: time.Hour, consumer: true, refailed: 1},
		{name: "done before the replay", reason: dlq.ReasonExhausted, fp: "fp", age: time.Hour},
	} {
		for _, during := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/store during the run=%v", tc.name, during), func(t *testing.T) {
				t.Parallel()
				c := newFakeClock()
				a := newArchive(t, c)
				st, err := memstore.New(idempotency.WithClock(c.Now))
				require.NoError(t, err)
				completeAs(t, st, "op-0", tc.fp)
				c.Advance(tc.age)
				ids := deadLetters(t, a, 0, 1, entrySpec{reason: tc.reason, retention: 24 * time.Hour, at: c.Now().Add(-time.Minute)})
				pub := &recorder{clock: c}
				if tc.consumer {
					pub.hook = claimingConsumer(t, a, st)
				}
				opts := on(c, replay.WithID("r"), replay.WithForce())
				if during {
					opts = append(opts, replay.WithStore(st))
				}
				sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, opts...)
				require.NoError(t, err)
				require.Equal(t, 1, sum.Replayed)
				require.Zero(t, sum.Resolved, "the DONE is not the replayed operation's")
				require.Equal(t, tc.refailed, sum.Refailed)
				e, err := a.Get(t.Context(), ids[0])
				require.NoError(t, err)
				require.Equal(t, archive.StateReplayed, e.State)
				require.Equal(t, tc.consumer, e.FailedAgainAs != "", "failed again: %q", e.FailedAgainAs)

				got, err := replay.Reconcile(t.Context(), a, st, "r")
				require.NoError(t, err)
				require.Zero(t, got.Resolved, "the DONE is not the replayed operation's")
				require.Equal(t, tc.refailed, got.Refailed)
				require.Equal(t, 1-tc.refailed, got.Pending)
				e, err = a.Get(t.Context(), ids[0])
				require.NoError(t, err)
				require.Equal(t, archive.StateReplayed, e.State)
			})
		}
	}
}

// The replayed operation's own completion resolves its entry, in the run
// and in Reconcile: the record's fingerprint is the entry's and its
// completing attempt began after the replay.
func TestDoneOfTheReplayResolves(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	st, err := memstore.New(idempotency.WithClock(c.Now))
	require.NoError(t, err)
	failed(t, st, "op-0")
	failed(t, st, "op-1")
	ids := deadLetters(t, a, 0, 2, entrySpec{retention: time.Hour})
	// The consumer runs op-0 while the run is under way; op-1 after it.
	pub := &recorder{clock: c, hook: func(p published) error {
		if p.msg.Metadata.Get(idempotency.DefaultMetadataKey) == "op-0" {
			done(t, st, "op-0")
		}
		return nil
	}}
	sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("mine"), replay.WithStore(st))...)
	require.NoError(t, err)
	require.Equal(t, 1, sum.Resolved)
	c.Advance(time.Minute)
	done(t, st, "op-1")
	got, err := replay.Reconcile(t.Context(), a, st, "mine")
	require.NoError(t, err)
	require.Equal(t, 1, got.Resolved)
	for _, id := range ids {
		e, err := a.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, archive.StateResolved, e.State)
	}
}

// minimalBatch is a store whose batch read returns what RecordsReader
// promises and no more (as sqlstore's and redisstore's do): no
// fingerprint, no history.
type minimalBatch struct {
	idempotency.Store
	gets int
}

func (s *minimalBatch) GetRecords(ctx context.Context, ns string, keys []string) (map[string]idempotency.Record, error) {
	recs, err := s.Store.(idempotency.RecordsReader).GetRecords(ctx, ns, keys)
	for k, r := range recs {
		recs[k] = idempotency.Record{Namespace: r.Namespace, Key: r.Key, State: r.State, ReopenedBy: r.ReopenedBy, ExpiresAt: r.ExpiresAt}
	}
	return recs, err
}

func (s *minimalBatch) Get(ctx context.Context, ns, key string) (idempotency.Record, error) {
	s.gets++
	return s.Store.Get(ctx, ns, key)
}

// A DONE record from a batch read without fingerprint and history is read
// whole (Get) before it resolves an entry; the others are not.
func TestBatchReadDoneReadWhole(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	st, err := memstore.New(idempotency.WithClock(c.Now))
	require.NoError(t, err)
	deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	_, err = replay.Run(t.Context(), a, &recorder{clock: c}, archive.Filter{}, on(c, replay.WithID("b"))...)
	require.NoError(t, err)
	done(t, st, "op-0")
	failed(t, st, "op-1")
	ms := &minimalBatch{Store: st}
	got, err := replay.Reconcile(t.Context(), a, ms, "b")
	require.NoError(t, err)
	require.Equal(t, 1, got.Resolved)
	require.Equal(t, 2, got.Pending)
	require.Equal(t, 1, ms.gets, "only the DONE record is read again")
}

// The store's clock may be up to a minute behind the run's: a completion
// of the replayed message still resolves its entry. Further behind, it
// looks older than the publish and resolves nothing (the package doc).
func TestDoneWithTheStoreClockBehind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behind   time.Duration
		resolved int
	}{{30 * time.Second, 1}, {2 * time.Minute, 0}} {
		t.Run(tc.behind.String(), func(t *testing.T) {
			t.Parallel()
			c := newFakeClock()
			a := newArchive(t, c)
			st, err := memstore.New(idempotency.WithClock(func() time.Time { return c.Now().Add(-tc.behind) }))
			require.NoError(t, err)
			failed(t, st, "op-0")
			deadLetters(t, a, 0, 1, entrySpec{retention: time.Hour})
			pub := &recorder{clock: c, hook: func(published) error { done(t, st, "op-0"); return nil }}
			sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("skew"), replay.WithStore(st))...)
			require.NoError(t, err)
			require.Equal(t, tc.resolved, sum.Resolved)
			got, err := replay.Reconcile(t.Context(), a, st, "skew")
			require.NoError(t, err)
			require.Equal(t, 1-tc.resolved, got.Pending)
			require.Zero(t, got.Resolved)
		})
	}
}
