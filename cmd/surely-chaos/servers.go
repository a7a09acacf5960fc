package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
)

// serverReady bounds how long a (re)started server may take to answer.
const serverReady = 20 * time.Second

// redisServer is the redis-server process of lease mode's store, started by
// this program on a free loopback port, with its AOF (appendfsync always)
// in a directory of the run: a restart keeps every DONE record. No other
// program uses it.
type redisServer struct {
	addr string
	bin  string
	args []string
	cmd  *exec.Cmd
}

// errNoRedisServer: the redis-server binary is not on PATH.
var errNoRedisServer = errors.New("redis-server binary not found on PATH (lease mode starts a Redis of its own)")

func startRedisServer(dir string, extra ...string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedisServer
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin}
	s.args = append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	return s, s.start()
}

// start starts the process and waits until it answers.
func (s *redisServer) start() error {
	// Not bound to the run's context: stop kills it on every path.
	s.cmd = exec.Command(s.bin, s.args...) //nolint:noctx // its own lifetime, ended by stop
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(serverReady)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("redis-server on %s did not answer within %v: %w", s.addr, serverReady, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the process (SIGKILL: a crash, not a shutdown) and reaps it.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// restart crashes the server and starts it again on the same port and
// directory.
func (s *redisServer) restart() error {
	s.stop()
	return s.start()
}

// natsServer is a NATS server with JetStream embedded in this process, on a
// free loopback port, storing in a directory of the run; it can be shut
// down and started again on the same port and store.
type natsServer struct {
	url  string
	opts server.Options
	srv  *server.Server
}

func startNATSServer(dir string) (*natsServer, error) {
	s := &natsServer{opts: server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		NoSigs: true, NoLog: true,
	}}
	return s, s.start()
}

func (s *natsServer) start() error {
	opts := s.opts // NewServer keeps and edits its options: one copy per start
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(serverReady) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("embedded NATS did not get ready within %v", serverReady)
	}
	s.srv = srv
	if s.opts.Port == -1 {
		s.opts.Port = srv.Addr().(*net.TCPAddr).Port
	}
	s.url = srv.ClientURL()
	return nil
}

func (s *natsServer) stop() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

func (s *natsServer) restart() error {
	s.stop()
	return s.start()
}

func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// quietRedis is go-redis's logger in this program: its pool and Sentinel
// lines (a dial refused while the store restarts or fails over) would
// drown the run's own lines; the run reports those events itself.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// It is set in init, not main, so that the test binary (which calls run,
// never main) is as quiet: a program configuring a library it imports,
// which only go-redis's global logger allows, not a registry between
// surely's packages (those have no init: internal/apicount's
// TestNoRegistriesInLibraryCode).
func init() { redis.SetLogger(quietRedis{}) }
