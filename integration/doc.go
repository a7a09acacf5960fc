// Package integration holds surely's end-to-end tests against real servers
// and real process crashes. It has no code of its own: everything lives in
// its _test.go files.
//
// The broker is Redis Streams (watermill-redisstream) and the dedup store is
// idempotency/redisstore, both on the shared Redis of SURELY_REDIS_URL. Every
// test uses its own stream, consumer group and key prefix
// (surely-it:<test>:<random>:) and deletes its keys at the end; none ever
// flushes or restarts the shared server. The outage test starts a private
// redis-server of its own (redis-server must be on PATH).
//
// Crashes are real: the test binary re-executes itself as a consumer process
// (SURELY_INTEGRATION_CHILD=1, configured by SURELY_INTEGRATION_CHILD_CONFIG),
// which prints a marker line at the injected crash point and blocks there;
// the test SIGKILLs it and starts another consumer.
//
//	SURELY_REQUIRE_SERVICES=1 SURELY_REDIS_URL=redis://127.0.0.1:6379 go test -race -count=1 ./integration/
//
// Without SURELY_REDIS_URL every test is skipped with the reason; with
// SURELY_REQUIRE_SERVICES=1 a missing server fails instead.
package integration
