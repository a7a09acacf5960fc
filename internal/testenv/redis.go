package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis connects to the Redis server of SURELY_REDIS_URL and pings it. The
// client is closed when the test ends. Tests must use their own key prefix
// and never flush the shared server.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	url := URL(t, "SURELY_REDIS_URL")
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("SURELY_REDIS_URL=%q: %v", url, err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		Unavailable(t, fmt.Sprintf("Redis at %s does not answer: %v", url, err))
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisServer is a redis-server process a test started on its own loopback
// port, so that it can stop and restart it without touching shared servers.
type RedisServer struct {
	Addr string
	bin  string
	dir  string
	args []string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server on a free loopback port (no persistence
// unless extra arguments ask for it). It is killed when the test ends.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	bin := Binary(t, "redis-server")
	port := FreePort(t)
	s := &RedisServer{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		bin:  bin,
		dir:  t.TempDir(),
	}
	s.args = append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, extra...)
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server on the same port and waits until it answers.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	s.cmd = exec.CommandContext(context.Background(), s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL) and waits for it to exit.
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
