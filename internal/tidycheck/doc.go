// Package tidycheck checks what "go mod tidy" records in the go.sum of a
// module that uses surely. It has no code of its own: the check is its test.
//
// "go mod tidy" loads every package in the user's "all" (the packages the
// module imports, transitively) and also the tests of each of them, with
// the packages those tests import: it keeps "go test all" reproducible
// (cmd/go/internal/modcmd/tidy.go sets LoadTests for the "all" pattern).
// The user's go.sum then lists every module those test imports come from,
// although nothing of them is built into the user's program. So a test of
// a core package (handler, middleware, idempotency, redisstore, retry, dlq,
// delivery, propagate) that imports a heavy helper puts that helper's
// dependencies into every user's go.sum: internal/testenv once imported
// nats-server this way, and handler's property test the SQLite driver.
// The broker helpers live in internal/testbroker, the SQLite property test
// in handler/internal/chainprop and the Prometheus exporter test in
// dlq/memarchive: no core package's test imports them.
//
// The same holds for each broker adapter: the conformance suite
// (adapters/adaptertest links the SQLite driver) and the tests on an
// embedded or emulated broker (nats-server, kfake, goaws) are in
// adapters/<broker>/integration, a test-only package nothing imports, and
// the RabbitMQ URL helper is internal/testamqp, apart from the embedded
// NATS server. The test tidies a module that imports the core packages,
// and one per adapter, and fails for every test-only module of surely
// that reaches its go.sum through a test of surely (go mod why tells it
// from a module the adapter builds with, or one a dependency's own test
// brings, such as watermill-sql's MySQL driver).
//
// testify stays in the user's go.sum whatever surely does: Watermill's and
// OpenTelemetry's own tests import it, and tidy loads them too.
package tidycheck
