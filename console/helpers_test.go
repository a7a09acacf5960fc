package console_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/memarchive"
	"github.com/surely-dev/surely/idempotency"
)

// t0 is the test clock's now.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// letter describes one dead letter to archive.
type letter struct {
	uuid, topic, handler, key string
	reason                    dlq.Reason
	err                       error
	payload                   []byte
	md                        map[string]string
	at                        time.Time
	retention                 time.Duration
}

// deadLetter builds the envelope dlq.Publisher would publish.
func deadLetter(l letter) *message.Message {
	msg := message.NewMessage(l.uuid, l.payload)
	for k, v := range l.md {
		msg.Metadata.Set(k, v)
	}
	if l.err == nil {
		l.err = errors.New("boom")
	}
	if l.reason == "" {
		l.reason = dlq.ReasonExhausted
	}
	if l.at.IsZero() {
		l.at = t0.Add(-time.Hour)
	}
	f := dlq.Failure{
		Fingerprint: fingerprint(l.uuid, l.payload),
		Reason:      l.reason, Err: l.err, Attempts: 2, OperationKey: l.key, Topic: l.topic, Handler: l.handler,
		Namespace: "ns", Retention: l.retention, At: l.at, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		History: []idempotency.AttemptRecord{
			{Attempt: 1, Started: l.at.Add(-2 * time.Second), Ended: l.at.Add(-time.Second), Result: idempotency.ResultFailed, Error: l.err.Error(), Type: "*errors.errorString", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
				Owner: "worker-1/4127"},
			{Attempt: 2, Started: l.at.Add(-time.Second), Ended: l.at, Result: idempotency.ResultFailed, Error: l.err.Error(), Owner: "worker-2/3310"},
		},
	}
	return dlq.Wrap(msg, f, nil, "worker-1", "group")
}

// fingerprint is the payload's fingerprint, as the dedup step gives it to
// the dead-letter step (and to its claims): a replay's DONE resolves an
// entry only when the record's fingerprint is the entry's.
func fingerprint(uuid string, payload []byte) string {
	ex, err := idempotency.NewExtractor()
	if err != nil {
		panic(err)
	}
	op, err := ex.Extract(message.NewMessage(uuid, payload))
	if err != nil {
		return "" // no key (a letter without a UUID): the envelope has no fingerprint either
	}
	return op.Fingerprint
}

// newArchive returns a memarchive holding the letters.
func newArchive(t *testing.T, letters ...letter) archive.Archive {
	t.Helper()
	ar, err := memarchive.New(dlq.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range letters {
		if err := ar.Publish("dlq", deadLetter(l)); err != nil {
			t.Fatal(err)
		}
	}
	return ar
}

// syncBuffer collects the audit log's lines, safe for the runs' goroutines.
type syncBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.lines = append(b.lines, string(p))
	b.mu.Unlock()
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "")
}

// recorder is a publisher that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	msgs map[string][]*message.Message
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs == nil {
		r.msgs = map[string][]*message.Message{}
	}
	r.msgs[topic] = append(r.msgs[topic], msgs...)
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) count(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs[topic])
}

// movingClock is a console's clock that reads t0 until Start, then moves
// from t0 with the wall clock: the replays' rate limiter schedules on the
// console's clock, and on a frozen one each wait would be longer than the
// last.
type movingClock struct{ start atomic.Pointer[time.Time] }

func (c *movingClock) Now() time.Time {
	if s := c.start.Load(); s != nil {
		return t0.Add(time.Since(*s))
	}
	return t0
}

// Start sets the clock moving.
func (c *movingClock) Start() {
	now := time.Now()
	c.start.CompareAndSwap(nil, &now)
}

// serve starts the console over ar with opts (plus WithoutAuth unless an
// authorization is among them is the caller's business).
func serve(t *testing.T, ar archive.Archive, opts ...dlq.Option) *httptest.Server {
	t.Helper()
	_, srv := serveConsole(t, ar, opts...)
	return srv
}

// serveConsole is serve, returning the console too.
func serveConsole(t *testing.T, ar archive.Archive, opts ...dlq.Option) (*console.Console, *httptest.Server) {
	t.Helper()
	c, err := console.New(ar, append([]dlq.Option{dlq.WithClock(func() time.Time { return t0 })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv
}

// request is a request bound to the test's context.
func request(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// get fetches path and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Do(request(t, http.MethodGet, srv.URL+path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode, body(t, resp)
}

// reply is a response read in full.
type reply struct {
	StatusCode int
	Header     http.Header
	Body       string
}

// post submits a form as a same-origin browser would, without following
// a redirect.
func post(t *testing.T, srv *httptest.Server, path string, form url.Values) reply {
	t.Helper()
	req := request(t, http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
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

// body reads and closes a response's body.
func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond until it holds, failing after a bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func jsonLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// withAudit is the console's audit log as JSON into w.
func withAudit(w io.Writer) dlq.Option { return dlq.WithLogger(jsonLogger(w)) }
