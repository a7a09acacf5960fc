// Package sqsemu runs an Amazon SQS emulator in process, on the loopback
// interface only, for tests and examples: goaws (github.com/Admiral-Piett/goaws
// v0.4.5) behind a small compatibility layer, and the client options that
// let the AWS SDK v2's SQS client talk to it.
//
//	srv, err := sqsemu.Start()
//	defer srv.Close()
//	client := awssqs.NewFromConfig(sqsemu.AWSConfig(), srv.ClientOptions()...)
//
// # What the layer adds to goaws
//
// goaws v0.4.5 speaks only the query protocol (form requests, XML replies);
// the SDK v2 speaks the JSON protocol. ClientOptions installs an
// http.RoundTripper (Transport) that translates each JSON request into
// goaws's form request and each XML reply back into JSON, including the
// error types the SDK maps to typed errors (QueueDoesNotExist, ...). Only
// the actions below are translated; any other fails with
// UnsupportedOperation:
// CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue,
// GetQueueAttributes, SetQueueAttributes, SendMessage, ReceiveMessage,
// DeleteMessage, ChangeMessageVisibility.
//
// The server side (Server) fixes what goaws gets wrong for at-least-once
// tests:
//
//   - ApproximateReceiveCount: goaws always reports 1; the server counts
//     receives per message ID and reports that count (an approximation of
//     SQS's, which a broker may also report approximately).
//   - A ReceiveMessage's VisibilityTimeout: goaws ignores it and uses the
//     queue's; the server applies it to the messages it hands out.
//   - Long polling: done by the server, outside goaws, so that a waiting
//     receive never holds goaws's state.
//   - Data races: goaws reads its queue map and queue settings without
//     locks; the server runs the actions that change them (CreateQueue,
//     DeleteQueue, SetQueueAttributes, PurgeQueue) alone, and the others
//     side by side, so that the race detector stays quiet.
//   - Visibility timeouts expire: the server runs goaws's PeriodicTasks
//     every 100ms.
//
// goaws keeps its queues in package-level state: one Server per process
// (Start refuses a second), and queue names unique per test. The server
// listens on 127.0.0.1 only; goaws's own binary, which listens on every
// interface, is never used. goaws's servertest package is not used either:
// it serves goaws's handlers unguarded (the races above) and cannot be
// shut down with its connections, which goleak reports.
package sqsemu

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/sirupsen/logrus"
)

// AccountID is the account in the emulator's queue URLs.
const AccountID = "000000000000"

// DefaultVisibilityTimeout is the visibility timeout of a queue created
// without one, in seconds (SQS's default).
const DefaultVisibilityTimeout = 30

// Polling intervals.
const (
	periodicInterval = 100 * time.Millisecond
	pollInterval     = 10 * time.Millisecond
	maxWait          = 20 * time.Second
)

var (
	runningMu sync.Mutex
	running   bool
)

// Server is a running emulator. Its methods are safe for concurrent use.
type Server struct {
	url      string
	goaws    http.Handler
	http     *http.Server
	listener net.Listener
	served   chan struct{}
	quit     chan struct{}
	periodic chan struct{}

	state sync.RWMutex // held exclusively by actions that change goaws's queue map or settings

	countsMu sync.Mutex
	counts   map[string]int // receives per message ID

	closeOnce sync.Once
}

// Start starts the emulator on a free port of 127.0.0.1. Only one may run
// per process at a time (goaws keeps global state); Close stops it.
func Start() (*Server, error) {
	runningMu.Lock()
	defer runningMu.Unlock()
	if running {
		return nil, errors.New("sqsemu: an emulator already runs in this process")
	}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sqsemu: listen: %w", err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())

	logrus.SetOutput(io.Discard) // goaws logs every message at info level
	logrus.SetLevel(logrus.ErrorLevel)
	app.CurrentEnvironment = app.Environment{
		Host: "127.0.0.1", Port: port, AccountID: AccountID,
		QueueAttributeDefaults: app.EnvQueueAttributes{VisibilityTimeout: DefaultVisibilityTimeout},
	}

	s := &Server{
		url:      "http://" + l.Addr().String(),
		goaws:    router.New(),
		listener: l,
		served:   make(chan struct{}),
		quit:     make(chan struct{}),
		periodic: make(chan struct{}),
		counts:   make(map[string]int),
	}
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.http.Serve(l)
	}()
	go func() {
		defer close(s.periodic)
		gosqs.PeriodicTasks(periodicInterval, s.quit)
	}()
	running = true
	return s, nil
}

// URL returns the emulator's endpoint, http://127.0.0.1:<port>.
func (s *Server) URL() string { return s.url }

// Close stops the emulator: its listener, its connections and its
// periodic tasks. Queues stay in goaws's state until the process ends.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		err = s.http.Close()
		<-s.served
		<-s.periodic
		runningMu.Lock()
		running = false
		runningMu.Unlock()
	})
	return err
}

// ServeHTTP serves one query-protocol request (what Transport sends).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	switch r.Form.Get("Action") {
	case "CreateQueue", "DeleteQueue", "SetQueueAttributes", "PurgeQueue":
		s.state.Lock()
		defer s.state.Unlock()
		s.goaws.ServeHTTP(w, r)
	case "ReceiveMessage":
		s.receive(w, r)
	default:
		s.state.RLock()
		defer s.state.RUnlock()
		s.goaws.ServeHTTP(w, r)
	}
}

// receive long-polls goaws without waiting inside it, then applies the
// request's VisibilityTimeout and the receive counts.
func (s *Server) receive(w http.ResponseWriter, r *http.Request) {
	wait := time.Duration(atoi(r.Form.Get("WaitTimeSeconds"))) * time.Second
	deadline := time.Now().Add(min(wait, maxWait))
	visibility := r.Form.Get("VisibilityTimeout")
	r.Form.Set("WaitTimeSeconds", "0")
	for {
		rec := httptest.NewRecorder()
		s.state.RLock()
		s.goaws.ServeHTTP(rec, r)
		s.state.RUnlock()
		if rec.Code != http.StatusOK {
			copyResponse(w, rec)
			return
		}
		var resp app.ReceiveMessageResponse
		if err := xml.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			http.Error(w, "sqsemu: goaws reply: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if len(resp.Result.Message) > 0 || !time.Now().Before(deadline) {
			s.received(r, visibility, &resp)
			w.Header().Set("Content-Type", "application/xml")
			_ = xml.NewEncoder(w).Encode(resp)
			return
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.quit:
			t.Stop()
			return
		}
	}
}

// received counts each message's receives into its ApproximateReceiveCount
// and applies the visibility timeout asked for.
func (s *Server) received(r *http.Request, visibility string, resp *app.ReceiveMessageResponse) {
	for _, m := range resp.Result.Message {
		s.countsMu.Lock()
		s.counts[m.MessageId]++
		n := s.counts[m.MessageId]
		s.countsMu.Unlock()
		found := false
		for _, a := range m.Attributes {
			if a.Name == "ApproximateReceiveCount" {
				a.Value, found = strconv.Itoa(n), true
			}
		}
		if !found {
			m.Attributes = append(m.Attributes, &app.ResultAttribute{Name: "ApproximateReceiveCount", Value: strconv.Itoa(n)})
		}
		if v := atoi(visibility); v > 0 {
			form := url.Values{
				"Action": {"ChangeMessageVisibility"}, "QueueUrl": {r.Form.Get("QueueUrl")},
				"ReceiptHandle": {m.ReceiptHandle}, "VisibilityTimeout": {strconv.Itoa(v)},
			}
			req := httptest.NewRequestWithContext(context.WithoutCancel(r.Context()), http.MethodPost, "/",
				strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			s.state.RLock()
			s.goaws.ServeHTTP(httptest.NewRecorder(), req)
			s.state.RUnlock()
		}
	}
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = io.Copy(w, bytes.NewReader(rec.Body.Bytes()))
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
