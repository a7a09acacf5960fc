package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
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

// startConsole runs `surely console` with args until the test ends, and
// returns the URL it prints and a stop that ends its context and returns
// its exit status.
func startConsole(t *testing.T, a *app, args ...string) (string, func() int) {
	t.Helper()
	out := &lineWriter{lines: make(chan string, 1)}
	a.stdout = &stickyWriter{w: out}
	a.stderr = &stickyWriter{w: newLockedBuffer()}
	ctx, cancel := context.WithCancel(context.Background())
	codes := make(chan int, 1)
	go func() { codes <- execute(ctx, a, append([]string{"console"}, args...)) }()
	var once sync.Once
	code := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			code = <-codes
		})
		return code
	}
	t.Cleanup(func() { stop() })
	select {
	case line := <-out.lines:
		return strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "surely console: ")), "/"), stop
	case code := <-codes:
		t.Fatalf("console exited with %d", code)
	}
	return "", stop
}

// send sends a request to the console at base as a browser on a page of
// host would (Sec-Fetch-Site: same-origin), without following a
// redirect; form, when not nil, is POSTed.
func send(t *testing.T, base, host, path string, form url.Values) (int, string) {
	t.Helper()
	method, body := http.MethodGet, io.Reader(nil)
	if form != nil {
		method, body = http.MethodPost, strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Host = host
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	client := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// Without authentication the console answers only a loopback Host on its
// port: a page on a name rebound to 127.0.0.1 (DNS rebinding) sends its
// own name, with Sec-Fetch-Site: same-origin, which the cross-origin
// protection lets through. It must read no entry and discard nothing.
func TestConsoleWithoutAuthenticationRefusesAForeignHost(t *testing.T) {
	a, _, _ := testApp(t)
	ar := memFixture(t, a)
	a.memBrokers["mem://rec"] = &recorder{}
	base, stop := startConsole(t, a, "--archive", "mem:fixture", "--to", "mem://rec", "--listen", "127.0.0.1:0")
	u, err := url.Parse(base)
	require.NoError(t, err)
	port := u.Port()
	id := dlqID(fixtureFailures()[0].uuid)
	discard := url.Values{"scope": {"selected"}, "id": {id}, "why": {"rebinding"}, "confirm": {"yes"}}

	for _, host := range []string{"attacker.example:" + port, "attacker.example", "localhost:1", "127.0.0.1:1", "10.0.0.7:" + port} {
		code, page := send(t, base, host, "/entry?id="+id, nil)
		assert.Contains(t, []int{http.StatusMisdirectedRequest, http.StatusForbidden}, code, "GET of an entry with Host %s", host)
		assert.NotContains(t, page, "10.00 EUR", "the payload was served to Host %s", host)
		code, _ = send(t, base, host, "/discard", discard)
		assert.Contains(t, []int{http.StatusMisdirectedRequest, http.StatusForbidden}, code, "POST /discard with Host %s", host)
		e, err := ar.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, archive.StateOpen, e.State, "a POST with Host %s discarded the entry", host)
	}
	for _, host := range []string{"localhost:" + port, "LocalHost:" + port, "127.0.0.1:" + port, "127.1.2.3:" + port, "[::1]:" + port} {
		code, page := send(t, base, host, "/entry?id="+id, nil)
		assert.Equal(t, http.StatusOK, code, "GET of an entry with Host %s", host)
		assert.Contains(t, page, "10.00 EUR", "Host %s", host)
	}
	// The same POST from a loopback Host is served: it was refused for
	// its Host alone.
	code, _ := send(t, base, "localhost:"+port, "/discard", discard)
	assert.Equal(t, http.StatusSeeOther, code)
	e, err := ar.Get(t.Context(), id)
	require.NoError(t, err)
	assert.Equal(t, archive.StateDiscarded, e.State)
	assert.Equal(t, exitOK, stop())
}

// On shutdown the console stops the replay runs it started and waits for
// their final save: a run is saved interrupted, resumable, not running
// forever.
func TestConsoleShutdownInterruptsItsReplayRuns(t *testing.T) {
	a, _, _ := testApp(t)
	ar := memFixture(t, a)
	published := make(chan struct{}, 10)
	a.memBrokers["mem://rec"] = &recorder{onPublish: func(int, string, *message.Message) { published <- struct{}{} }}
	base, stop := startConsole(t, a, "--archive", "mem:fixture", "--to", "mem://rec", "--listen", "127.0.0.1:0")
	u, err := url.Parse(base)
	require.NoError(t, err)

	// One message every 1000 s: the first is published at once, the
	// second waits.
	code, _ := send(t, base, u.Host, "/replay", url.Values{"rate": {"0.001"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	<-published
	require.Equal(t, exitOK, stop())
	runs, err := ar.ListReplays(t.Context())
	require.NoError(t, err)
	require.Len(t, runs, 1)
	run := runs[0]
	assert.Equal(t, archive.RunInterrupted, run.State, "the run after the console stopped")
	assert.Equal(t, 1, run.Replayed)
}
