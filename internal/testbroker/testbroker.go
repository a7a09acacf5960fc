// Package testbroker finds the message brokers that integration tests run
// against (SURELY_NATS_URL) and runs an embedded NATS
// server with JetStream inside the test process.
//
// It is apart from testenv so that only the tests that need a broker link
// nats-server and the broker clients. The tests of the core packages
// (handler, middleware, idempotency and its stores, retry, dlq, delivery,
// propagate) must not import it: "go mod tidy" in a module that imports a
// package also loads that package's tests and their imports, and records
// every module they come from in the user's go.sum (see
// internal/tidycheck).
package testbroker
