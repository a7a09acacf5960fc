package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// output collects what the program prints, safe for its goroutines.
type output struct {
	mu     sync.Mutex
	chunks []string
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.chunks = append(o.chunks, string(p))
	o.mu.Unlock()
	return len(p), nil
}

func (o *output) String() string { o.mu.Lock(); defer o.mu.Unlock(); return strings.Join(o.chunks, "") }

// request is a request bound to the test's context.
func request(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// waitFor polls cond until it holds, failing after a bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOutageThenReplayFromTheConsole runs the program: real dead letters,
// the console's overview, a dry run and a replay through the page, and the
// consumer charging the replayed orders.
func TestOutageThenReplayFromTheConsole(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &output{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, filepath.Join(t.TempDir(), "billing.db"), "127.0.0.1:0", 0, out) }()
	re := regexp.MustCompile(`console: (http://\S+/)`)
	waitFor(t, "the console's URL", func() bool { return re.MatchString(out.String()) })
	base := re.FindStringSubmatch(out.String())[1]

	resp, err := http.DefaultClient.Do(request(t, http.MethodGet, base, nil))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(page), `id="total">10<`) || !strings.Contains(string(page), "main.gatewayError") {
		t.Fatalf("the overview does not show the 10 dead letters:\n%s", page)
	}
	postForm := func(path string, form url.Values) []byte {
		req := request(t, http.MethodPost, base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		page, _ := io.ReadAll(resp.Body)
		return page
	}
	page = postForm("dry-run", url.Values{"reason": {"exhausted"}})
	if !strings.Contains(string(page), "<b>9</b> dead letters would be replayed") {
		t.Fatalf("the dry run does not offer the 9 exhausted orders:\n%s", page)
	}
	page = postForm("replay", url.Values{"reason": {"exhausted"}, "rate": {"200"}, "confirm": {"yes"}})
	if !strings.Contains(string(page), `id="state">`) {
		t.Fatalf("the replay did not lead to its run page:\n%s", page)
	}
	waitFor(t, "the replayed orders to be charged", func() bool {
		return strings.Contains(out.String(), "charged order-1002") && strings.Contains(out.String(), "charged order-1010")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
