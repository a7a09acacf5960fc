// Package idempotencytest is the conformance suite every idempotency.Store
// runs: one set of tests for the state machine of package idempotency, so
// that memstore, redisstore and sqlstore behave the same.
//
// # Running it
//
// A store's own test file calls [Run] with a function that builds a fresh
// [Harness] for each subtest:
//
//	func TestConformance(t *testing.T) {
//		idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
//			clock := newFakeClock()
//			s, err := memstore.New(idempotency.WithClock(clock.Now), idempotency.WithRetention(time.Hour))
//			require.NoError(t, err)
//			return idempotencytest.Harness{
//				Store:     s,
//				Advance:   func(_ *testing.T, d time.Duration) { clock.Advance(d) },
//				Lease:     10 * time.Second,
//				Retention: time.Hour,
//			}
//		})
//	}
//
// Every subtest calls t.Parallel, builds its own Harness and uses its own
// random namespace ("ct-" and 16 hex digits), so a store on a real server
// can share one server (and one Store value) between all subtests and with
// other test runs; the suite never deletes or flushes anything. Records it
// leaves behind are forgotten by the store's own retention.
//
// # Time
//
// Leases and retention are tested by moving the store's clock with
// [Harness.Advance]. A store with an injectable clock moves a fake clock
// (no sleeps: the suite then takes milliseconds). A store whose clock is a
// server's (Redis TIME, SQL now()) sleeps instead; give it a short
// [Harness.Lease] (150ms) and [Harness.Retention] (400ms) and build the store
// with that retention. The suite waits 1.5×Lease for a lease to expire and
// 1.5×Retention for a record to be forgotten, and claims whose expiry it
// does not test hold a one-minute lease, so no timing assertion depends on
// how fast the server answers to within tens of milliseconds. With those
// values the whole suite takes about three seconds of wall time, its
// subtests running in parallel.
//
// # What is checked
//
// The subtests follow the package doc of idempotency: exactly one winner
// among concurrent claims; takeover after lease expiry with a new token and
// ResultUnknown as the previous attempt; fencing by token (a stale owner gets ErrLeaseLost and
// changes nothing, an expired owner nobody replaced still succeeds);
// Completed with the stored outcome byte for byte; Release and the
// ResultFailed/ResultCanceled hand-over; Conflict in every state; the
// durable budget (releases, final releases and crash loops all end
// Exhausted, canceled releases are refunded, also in the fresh budget of a
// replay that reopens the record); retention; namespaces and
// opaque keys (separators, glob and hash-tag characters, Unicode); request
// validation (ErrInvalidRequest, nothing stored); the owner of each attempt
// kept in the history, across a takeover; the history bound and text
// truncation; Get.
//
// Transitions holds the store to the state machine itself: surely writes
// it once, as pure functions over a record that memstore and sqlstore run
// (and redisstore's Lua scripts must agree with). Each of its scenarios
// (completions and duplicates; failed, canceled and final releases;
// replays reopening a record; crash loops; retry-after delays; stale
// owners) drives the store and those functions through the same calls and
// requires the same answer to every call and the same record after it
// (times only where they are set: the store's clock is not the model's).
//
// The tests of an optional interface run when the store implements it,
// and are skipped (saying why) when it does not: for
// [idempotency.Lister], every filter alone and together (a key across
// namespaces included), paging with a cursor, age by the store's clock,
// records past their retention left out, a listed record's fields (no
// outcome), and invalid filters wrapping ErrInvalidRequest; a store value
// that cannot list in its configuration (an error wrapping
// errors.ErrUnsupported: redisstore on a Cluster) skips them. For
// [idempotency.RecordsReader], the records of many keys as Get gives
// them, keys without a record, of another or an invalid namespace, or
// past their retention absent. The listing tests share the store with
// the other subtests, so they select their own namespaces and keys; a
// zero filter is required to list at least their records.
//
// Where the contract is silent the suite decides, and says so here:
//
//   - A lease ends with Complete or Release: Complete, Release or Extend with
//     that lease afterwards return ErrLeaseLost and change nothing (a late
//     Release must never turn a DONE record back into FAILED).
//   - Retention counts from the last change: a DONE record is forgotten a
//     retention after Complete, a FAILED or EXHAUSTED one a retention after
//     its Release (or the claim that found the budget spent), and an
//     abandoned IN_PROGRESS record (its owner died) a retention after its
//     lease expired; Extend moves that deadline with the lease.
//   - Extend with a non-positive duration is an invalid request
//     (ErrInvalidRequest).
//   - Get of an invalid namespace or key returns ErrNotFound or an error
//     wrapping ErrInvalidRequest.
//   - Times a store returns (lease expiries) may be rounded to the
//     millisecond; the suite compares them with a 1ms tolerance.
package idempotencytest
