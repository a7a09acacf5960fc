package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestErrorsNeverShowPassword runs every command path that shows a URL in
// an error (a URL of the wrong kind, a broker URL with a surely parameter
// or an unknown scheme, a URL that does not parse, a bad MySQL DSN, a
// server that cannot be reached) and checks the password never reaches
// stderr.
func TestErrorsNeverShowPassword(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-pw"
	for _, args := range [][]string{
		{"dlq", "stats", "--archive", "amqp://guest:s3cr3t-pw@127.0.0.1:5672/"},
		{"dlq", "stats", "--archive", "nats://app:s3cr3t-pw@127.0.0.1:4222"},
		{"dlq", "stats", "--archive", "postgres://app:s3cr3t-pw@db:bad port/app"},
		{"dlq", "stats", "--archive", "postgres://app:s3cr3t-pw@127.0.0.1:1/app?connect_timeout=1"},
		{"dlq", "stats", "--archive", "postgres://app@127.0.0.1:1/app?password=s3cr3t-pw&connect_timeout=1"},
		{"dlq", "stats", "--archive", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:1/test"},
		{"dlq", "stats", "--archive", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:1)/test?prefix=%zz"},
		{"dlq", "stats", "--archive", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:1)/test?parseTime=maybe"},
		{"dlq", "stats", "--archive", "redis://:s3cr3t-pw@127.0.0.1:1/0"},
		{"dlq", "stats", "--archive", "redis://:s3cr3t-pw@127.0.0.1:1/0?foo=bar"},
		{"dlq", "ls", "--archive", "ftp://app:s3cr3t-pw@h/x"},
		{"inspect", "k", "--namespace", "ns", "--store", "amqp://guest:s3cr3t-pw@127.0.0.1:5672/"},
		{"inspect", "k", "--namespace", "ns", "--store", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:1)/test?table=%zz"},
		{"dlq", "replay", "--archive", "mem:fixture", "--broker", "amqp://guest:s3cr3t-pw@127.0.0.1:5672/?prefix=x"},
		{"dlq", "replay", "--archive", "mem:fixture", "--broker", "kafka://app:s3cr3t-pw@h:9092"},
		{"dlq", "replay", "--archive", "mem:fixture", "--broker", "postgres://db/app?password=s3cr3t-pw"},
		{"dlq", "replay", "--archive", "mem:fixture", "--broker", "nats://app:s3cr3t-pw@%zz"},
		{"dlq", "replay", "--archive", "mem:fixture", "--broker", "redis://:s3cr3t-pw@127.0.0.1:1/0?foo=bar"},
		{"dlq", "replay", "--archive", "mem:fixture", "--broker", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:1)/test"},
	} {
		a, _, _ := testApp(t)
		memFixture(t, a)
		out, errOut, code := run(t, a, args...)
		assert.NotEqual(t, exitOK, code, "%v", args)
		assert.NotEmpty(t, errOut, "%v", args)
		assert.NotContains(t, errOut, pw, "%v", args)
		assert.NotContains(t, out, pw, "%v", args)
	}
}
