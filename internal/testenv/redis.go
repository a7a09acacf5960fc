package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// UniversalOptions turns a redis:// URL into the options surely's Redis
// constructors take.
func UniversalOptions(url string) (*redis.UniversalOptions, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return &redis.UniversalOptions{
		Addrs: []string{o.Addr}, Protocol: o.Protocol, Username: o.Username, Password: o.Password,
		DB: o.DB, TLSConfig: o.TLSConfig,
	}, nil
}

// RedisStream returns a stream name of the test's own on admin's server;
// every key starting with it is deleted when the test ends (SCAN + DEL,
// never FLUSH).
func RedisStream(t testing.TB, admin *redis.Client) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "surely-test:" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cursor uint64
		for range 1000 {
			keys, next, err := admin.Scan(ctx, cursor, name+"*", 500).Result()
			if err != nil {
				t.Errorf("cleanup: SCAN %s*: %v", name, err)
				return
			}
			if len(keys) > 0 {
				if err := admin.Del(ctx, keys...).Err(); err != nil {
					t.Errorf("cleanup: DEL: %v", err)
					return
				}
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	})
	return name
}
