package console_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/envelope"
)

// sendAs sends a request to srv as a browser on a page of host would:
// Host is host and Sec-Fetch-Site same-origin (the browser's view after
// DNS rebinding). A form, when not nil, is POSTed; no redirect is
// followed.
func sendAs(t *testing.T, srv *httptest.Server, host, path string, form url.Values) reply {
	t.Helper()
	req := request(t, http.MethodGet, srv.URL+path, nil)
	if form != nil {
		req = request(t, http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Host = host
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	client := *srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	return reply{StatusCode: resp.StatusCode, Header: resp.Header, Body: body(t, resp)}
}

// With WithAllowedHosts a page on a name rebound to the console's address
// (Host attacker.example:PORT, same-origin to the browser, so the
// cross-origin protection lets it through) reads no entry and discards
// nothing; loopback names on the console's port, and the hosts listed, are
// served.
func TestAllowedHostsRefuseARebindingPage(t *testing.T) {
	ctx := t.Context()
	ar := newArchive(t, letter{uuid: "h1", topic: "orders", payload: []byte(`{"card":"visa-4242"}`), retention: 72 * time.Hour})
	audit := &syncBuffer{}
	srv := serve(t, ar, console.WithoutAuth(), console.WithPublisher(&recorder{}), withAudit(audit),
		console.WithAllowedHosts("ops.example.com", "proxy.example:8443", "[fd00::5]:8080"))
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	id := envelope.DeadLetterUUID("h1")
	discard := url.Values{"scope": {"selected"}, "id": {id}, "why": {"rebinding"}, "confirm": {"yes"}}

	for _, host := range []string{
		"attacker.example:" + port, "attacker.example", "localhost:1", "127.0.0.1:1", "[::1]:1",
		"localhost", "10.0.0.7:" + port, "proxy.example:8444", "proxy.example", "[fd00::5]:8081", "ops.example.com.evil:" + port,
	} {
		resp := sendAs(t, srv, host, "/entry?id="+id, nil)
		if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(resp.Body, "visa-4242") {
			t.Errorf("GET of an entry with Host %s: %d; want 421 without the payload", host, resp.StatusCode)
		}
		if resp := sendAs(t, srv, host, "/discard", discard); resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("POST /discard with Host %s: %d, want 421", host, resp.StatusCode)
		}
		if e, err := ar.Get(ctx, id); err != nil || e.State != archive.StateOpen {
			t.Fatalf("after a POST with Host %s: %s (%v), want open", host, e.State, err)
		}
	}
	if strings.Contains(audit.String(), "discard") {
		t.Errorf("a refused request wrote an audit line: %s", audit.String())
	}
	for _, host := range []string{
		"localhost:" + port, "LocalHost.:" + port, "127.0.0.1:" + port, "127.8.9.10:" + port, "[::1]:" + port,
		"ops.example.com", "OPS.example.com:" + port, "ops.example.com:443", "proxy.example:8443", "[fd00::5]:8080",
	} {
		if resp := sendAs(t, srv, host, "/entry?id="+id, nil); resp.StatusCode != http.StatusOK || !strings.Contains(resp.Body, "visa-4242") {
			t.Errorf("GET of an entry with Host %s: %d, want the entry", host, resp.StatusCode)
		}
	}
	// The same POST from a loopback Host discards: it was refused for its
	// Host alone.
	if resp := sendAs(t, srv, "localhost:"+port, "/discard", discard); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /discard with Host localhost:%s: %d %s", port, resp.StatusCode, resp.Body)
	}
	if e, err := ar.Get(ctx, id); err != nil || e.State != archive.StateDiscarded {
		t.Errorf("after the loopback POST: %s (%v), want discarded", e.State, err)
	}
}

// Without WithAllowedHosts the console serves any Host (its authorization
// decides); with it, a request whose connection has no local address (no
// http.Server) is served for a listed host only: the loopback port is not
// known.
func TestAllowedHostsIsOptInAndNeedsTheLocalPortForLoopback(t *testing.T) {
	ar := newArchive(t, letter{uuid: "h2", topic: "orders"})
	if resp := sendAs(t, serve(t, ar, console.WithoutAuth()), "attacker.example:80", "/", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("without WithAllowedHosts: %d, want 200", resp.StatusCode)
	}
	h, err := console.New(ar, console.WithoutAuth(), console.WithAllowedHosts("ops.example.com"), dlq.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]int{"localhost:80": http.StatusMisdirectedRequest, "ops.example.com": http.StatusOK} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+host+"/", nil))
		if w.Code != want {
			t.Errorf("Host %s without a local address: %d, want %d", host, w.Code, want)
		}
	}
}

func TestWithAllowedHostsRefusesWhatIsNotAHost(t *testing.T) {
	ar := newArchive(t)
	for _, host := range []string{"", "http://ops.example.com", "ops.example.com/dlq", "*.example.com", "ops.example.com:0",
		"ops.example.com:70000", "ops.example.com:https", "ops..example.com", "user@ops.example.com", "[ops.example.com]:80"} {
		if _, err := console.New(ar, console.WithoutAuth(), console.WithAllowedHosts(host)); !errors.Is(err, dlq.ErrInvalidOption) {
			t.Errorf("WithAllowedHosts(%q): %v, want ErrInvalidOption", host, err)
		}
	}
	if _, err := console.New(ar, console.WithoutAuth(), console.WithAllowedHosts("ops.example.com", "ops.example.com:8443",
		"10.0.0.5", "10.0.0.5:8080", "fd00::5", "[fd00::5]", "[fd00::5]:8080", "Ops.Example.Com.")); err != nil {
		t.Errorf("valid hosts: %v", err)
	}
}
