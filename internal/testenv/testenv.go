// Package testenv finds the servers that integration tests run against.
//
// A test asks for a server by its environment variable (SURELY_REDIS_URL,
// ...). When the variable is unset or the server does not answer, the test
// is skipped with a one-line reason, unless SURELY_REQUIRE_SERVICES=1, in
// which case it fails: CI sets it so that a missing server can never pass as
// a green run.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Required reports whether SURELY_REQUIRE_SERVICES=1.
func Required() bool { return os.Getenv("SURELY_REQUIRE_SERVICES") == "1" }

// Unavailable skips the test with reason, or fails it when services are required.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("SURELY_REQUIRE_SERVICES=1 but %s", reason)
	}
	t.Skip(reason)
}

// URL returns the value of the environment variable env, or skips (fails
// under SURELY_REQUIRE_SERVICES=1) when it is unset.
func URL(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		Unavailable(t, env+" is not set")
	}
	return v
}

// Binary returns the path of an executable on PATH, or skips (fails under
// SURELY_REQUIRE_SERVICES=1) when it is missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, name+" binary not found on PATH")
	}
	return p
}
