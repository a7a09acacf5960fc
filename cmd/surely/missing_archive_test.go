package main

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/internal/testenv"
)

// TestRedisArchiveWrongPrefix: a Redis archive URL whose prefix holds no
// archive is an error naming the prefixes that do hold one, not an empty
// archive ("dead letters: 0", exit 0). A private server, so that the only
// archives on it are the test's.
func TestRedisArchiveWrongPrefix(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	ar, err := redisarchive.New(client, archive.WithPrefix("app:dlq"))
	require.NoError(t, err)
	fill(t, ar)
	url := "redis://" + srv.Addr + "/0"

	a, _, _ := testApp(t)
	out, _, code := run(t, a, "dlq", "stats", "--archive", url+"?prefix=app:dlq")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "dead letters: 4")

	for _, args := range [][]string{
		{"dlq", "stats", "--archive", url + "?prefix=other:dlq"},
		{"dlq", "stats", "--archive", url},
		{"dlq", "ls", "--archive", url + "?prefix=other:dlq"},
	} {
		out, stderr, code := run(t, a, args...)
		assert.Equal(t, exitError, code, "%v: %s", args, out)
		assert.NotContains(t, out, "dead letters: 0", "%v", args)
		assert.Contains(t, stderr, "no archive", "%v", args)
		assert.Contains(t, stderr, `"app:dlq"`, "%v: the hint names the prefix that holds one", args)
	}

	// A server with no archive at all: the error, without a hint.
	empty := testenv.StartRedis(t)
	_, stderr, code := run(t, a, "dlq", "stats", "--archive", "redis://"+empty.Addr+"/0")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "no archive")
	assert.NotContains(t, stderr, "app:dlq")
}
