package testenv

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a loopback TCP proxy to one server that counts the bytes the
// server sent to its clients: a test connects through it to measure what a
// call transferred.
type Proxy struct {
	Addr string
	sent atomic.Int64
}

// StartProxy starts a proxy to target on a free loopback port. It is
// closed, with every connection through it, when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{Addr: l.Addr().String()}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			var d net.Dialer
			server, err := d.DialContext(context.Background(), "tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			track(client)
			track(server)
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(server, client)
				_ = server.Close()
			}()
			go func() {
				defer wg.Done()
				_, _ = io.Copy(counting{client, &p.sent}, server)
				_ = client.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// Sent returns how many bytes the server has sent through the proxy so far.
func (p *Proxy) Sent() int64 { return p.sent.Load() }

// counting is a writer that adds what it wrote to n.
type counting struct {
	w io.Writer
	n *atomic.Int64
}

func (c counting) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}
