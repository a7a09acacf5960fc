// Package adaptertest is the conformance suite that every surely broker
// adapter runs: the same reliability checks on every broker, through a real
// Watermill router and surely's handler.New.
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, newAdapter, adaptertest.Features{
//			DeliveryCount: true, NackDelay: true, LeaseExtension: true,
//			PubSub: &tests.Features{ConsumerGroups: true, Persistent: true},
//		})
//	}
//
//	func TestMain(m *testing.M) {
//		adaptertest.RunChild(newChildSubscriber) // the crash test's child processes
//		goleak.VerifyTestMain(m)
//	}
//
// newAdapter returns an Adapter (topics, publishers, subscribers in a
// consumer group, a malformed message, and the environment a child process
// needs); Features says what the broker does and lacks. A feature the
// broker lacks never fails a test: the test checks the honest fallback
// instead (Count 0, NackAfter false), or skips with the reason.
//
// # Adapters outside this module
//
// Everything the suite asks of an adapter is in its public API (Adapter,
// Features, RunChild, the stores below): an adapter written in another
// module implements Adapter over its own client, puts delivery.Info and
// delivery.Control in each message's context, marks a message it cannot
// decode with delivery.KeyDecodeError, and calls Run (and RunChild). Nothing of
// surely's internal packages is needed, nor a server for surely's side.
// The module's examples/externaladapter is such an adapter, a module of
// its own over an in-memory broker, importing only surely's public
// packages.
//
// # Stores
//
// The suite takes its idempotency stores from Features, so that an adapter
// can run it against the store it is used with:
//
//   - Features.NewStore makes the store of each test that runs its
//     consumers in the test process; by default NewMemStore, an
//     idempotency/memstore of the test's own.
//   - Features.SharedStore is the durable store that the crash test's
//     parent and child processes share, one per crash test; by default
//     SQLiteStore, idempotency/sqlstore on a SQLite file in the test's
//     temporary directory (modernc.org/sqlite: pure Go, no server). A
//     SharedStore creates a store in the parent and opens it by a location
//     string in the parent and in each child; the children get it from
//     RunChild's WithSharedStore, which must name the same SharedStore.
//
// Neither default needs a server, so the suite runs wherever the broker
// does. The dead letter is always an in-memory publisher.
//
// # Tests
//
// Each runs in parallel with its own topic, consumer group, store (from
// Features.NewStore, or the SharedStore for the crash test) and in-memory
// dead letter.
//
//   - AckAfterCommit: a delivery stays unsettled while its handler runs
//     (past AckWait), is acked only after the store's Complete succeeded,
//     is nacked and comes back when Complete fails, and, acked, does not
//     come back.
//   - NackRedelivers: a failed delivery is nacked and redelivered; with
//     DeliveryCount the handler reads Count 1, then 2 and Redelivered,
//     through delivery.InfoFrom; without, Count stays 0.
//   - NackDelay: retry.After(500ms) spaces the redelivery by at least
//     500ms minus 50ms, measured from the deliveries' timestamps (there is
//     no upper bound). With NackDelay the adapter's Control.NackAfter
//     accepted the delay (the broker held the message back); without, it
//     refused and the chain waited.
//   - RetryAfterPastInProcess: retry.After(1s) with 200ms of in-process
//     time: the second attempt runs no sooner than 1s minus 50ms after the
//     failure, and is attempt 2. With NackDelay the broker waits the whole
//     delay; without, the chain waits 200ms and the store's retry-after
//     time answers the early redeliveries InProgress, uncharged.
//   - SlowHandler: a handler running 3×AckWait runs once, with two
//     competing consumers. With LeaseExtension the message is delivered
//     once (the dedup step extended the broker's deadline), and a control
//     run without surely's chain shows that the broker does redeliver it.
//   - Malformed: a message the subscriber cannot decode is dead-lettered
//     with reason decode, its raw bytes as payload and the decoding error,
//     then acked; the messages after it are processed.
//   - Load: Features.Messages (2,000) messages, two competing consumers,
//     transient failures on 10% of the attempts (a nack and a redelivery
//     each), a few poison messages (permanent errors, and failures on every
//     attempt): every good message's effect happens exactly once and is
//     committed once, every poison message is dead-lettered with its
//     reason, none is lost. It fails on a stall, 30s in which no delivery
//     began or was settled, or after 5m in all (a loaded machine is slow).
//   - CrashRedelivers: a child consumer process is SIGKILLed inside its
//     handler before the effect; another child of the group gets the
//     message, as attempt 2 (and delivery count 2 or more), and runs the
//     effect once (each effect appends a line to a file that the parent
//     reads). The parent and the children share Features.SharedStore,
//     where the record ends DONE after two attempts, the first one's
//     result unknown.
//   - CloseTimeout (with Features.CloseTimeout): a subscriber's Close,
//     with a message handed out and never settled, returns no sooner than
//     the close timeout (or AckWait, when the delivery ends there) and
//     well before 30s (the default an adapter would
//     fall back to), cancels the message's context, and the broker hands
//     the message to another subscriber of the group.
//   - WatermillPubSub (with Features.PubSub): Watermill's universal
//     tests.TestPubSub; Features.PubSubSkip names the ones an adapter
//     departs from on purpose, with the reason.
//
// # Child processes
//
// The crash test re-executes the test binary (os.Args[0] -test.run=^$)
// with SURELY_ADAPTERTEST_CHILD=1, a JSON configuration (with the shared
// store's name and location), and the environment of Adapter.ChildEnv.
// RunChild, called first in TestMain, turns that process into a consumer
// built with the adapter's own NewChildSubscriber over the shared store,
// prints a marker line at the crash point and blocks there until the
// parent kills it. A child exits when its stdin closes, so
// a parent that dies leaves none behind.
package adaptertest
