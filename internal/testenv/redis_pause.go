package testenv

import (
	"syscall"
	"testing"
)

// Pause stops the server's process (SIGSTOP) without closing its
// connections: to its peers it is a server that stopped answering, such
// as a replica that lags. Resume continues it.
func (s *RedisServer) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *RedisServer) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *RedisServer) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("redis-server on %s is not running", s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal redis-server on %s: %v", s.Addr, err)
	}
}
