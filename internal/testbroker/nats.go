package testbroker

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/surely-dev/surely/internal/testenv"
)

// NATS returns the URL of the NATS server of SURELY_NATS_URL (e.g.
// nats://127.0.0.1:4222) after checking that it answers with JetStream
// enabled. Tests on the shared server must use their own randomly named
// streams and consumers, delete them, and touch nothing else.
func NATS(t testing.TB) string {
	t.Helper()
	url := testenv.URL(t, "SURELY_NATS_URL")
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second), nats.MaxReconnects(0))
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("NATS at %s does not answer: %v", url, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream on %s: %v", url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("NATS at %s has no JetStream: %v", url, err))
	}
	return url
}

// EmbeddedNATS starts a NATS server with JetStream inside the test process
// (see StartNATS) and returns its URL.
func EmbeddedNATS(t testing.TB) string {
	t.Helper()
	return StartNATS(t).URL
}

// NATSServer is a nats-server run as a library on a loopback port, with
// JetStream storing in a directory of the test. It can be stopped and
// started again on the same port and store, as a broker restart.
type NATSServer struct {
	// URL is nats://127.0.0.1:<port>; it stays the same across restarts.
	URL  string
	opts server.Options
	srv  *server.Server
}

// StartNATS starts an embedded server on a random free port with JetStream
// in t.TempDir(). It installs no signal handlers and logs nothing. It is
// shut down, and waited for, when the test ends.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	s := &NATSServer{opts: server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoSigs:    true,
		NoLog:     true,
	}}
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server on the same port and store directory and
// waits until it accepts connections.
func (s *NATSServer) Start(t testing.TB) {
	t.Helper()
	if s.srv != nil {
		t.Fatalf("embedded NATS already running on %s", s.URL)
	}
	opts := s.opts // NewServer keeps a pointer and edits it: one copy per run.
	srv, err := server.NewServer(&opts)
	if err != nil {
		t.Fatalf("embedded NATS: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		t.Fatalf("embedded NATS did not get ready in 10s")
	}
	s.srv = srv
	if s.opts.Port == -1 {
		s.opts.Port = srv.Addr().(*net.TCPAddr).Port
	}
	s.URL = srv.ClientURL()
}

// Stop shuts the server down and waits until it has; its store stays.
func (s *NATSServer) Stop() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}
