package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestConsoleRefusesAnOpenAddressWithoutAuthentication(t *testing.T) {
	a, _, _ := testApp(t)
	memFixture(t, a)
	for _, listen := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8080"} {
		_, errOut, code := run(t, a, "console", "--archive", "mem:fixture", "--listen", listen)
		if code != exitUsage || !strings.Contains(errOut, "not a loopback address") {
			t.Errorf("--listen %s: exit %d, stderr %q; want a usage error", listen, code, errOut)
		}
	}
	if _, errOut, code := run(t, a, "console", "--archive", "mem:fixture", "--listen", "nonsense"); code != exitUsage {
		t.Errorf("--listen nonsense: exit %d, stderr %q", code, errOut)
	}
}

// lineWriter hands the first line written to it to a channel.
type lineWriter struct {
	once  sync.Once
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { w.lines <- string(p) })
	return len(p), nil
}

func TestConsoleServesWithATokenUntilTheContextEnds(t *testing.T) {
	a, _, _ := testApp(t)
	memFixture(t, a)
	a.env = func(k string) string {
		if k == envConsoleToken {
			return "t0ken"
		}
		return ""
	}
	out := &lineWriter{lines: make(chan string, 1)}
	a.stdout = &stickyWriter{w: out}
	ctx, cancel := context.WithCancel(context.Background())
	codes := make(chan int, 1)
	go func() {
		codes <- execute(ctx, a, []string{"console", "--archive", "mem:fixture", "--listen", "127.0.0.1:0"})
	}()
	var line string
	select {
	case line = <-out.lines:
	case code := <-codes:
		t.Fatalf("console exited with %d", code)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "surely console: "))
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("printed %q", line)
	}
	get := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, _ := get("wrong"); code != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d, want 401", code)
	}
	code, page := get("t0ken")
	if code != http.StatusOK || !strings.Contains(page, `id="total"`) || strings.Contains(page, "dry-run") {
		t.Errorf("with the token: %d; want the overview, read-only (no broker)", code)
	}
	cancel()
	if code := <-codes; code != exitOK {
		t.Errorf("after the context ended: exit %d", code)
	}
}
