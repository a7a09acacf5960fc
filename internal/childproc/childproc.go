// Package childproc is the plumbing of crash tests that run a consumer as a
// child process: its stdout split into lines to wait for markers on, and a
// stderr buffer for the failure log.
package childproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lines splits a child's stdout into lines, keeping them all for the
// failure log (All) and handing each to C, which WaitLine reads.
type Lines struct {
	C    chan string
	mu   sync.Mutex
	buf  []byte
	seen []string
}

// NewLines returns a Lines whose channel buffers n lines.
func NewLines(n int) *Lines { return &Lines{C: make(chan string, n)} }

// Write implements io.Writer.
func (w *Lines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		w.seen = append(w.seen, line)
		select {
		case w.C <- line:
		default: // nobody reads that far behind; the line is still in seen
		}
	}
}

// All returns every line written so far.
func (w *Lines) All() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.seen, "\n")
}

// Errors of WaitLine.
var (
	ErrExited  = errors.New("child exited")
	ErrTimeout = errors.New("timed out")
)

// WaitLine reads lines until one satisfies match and returns it. exited is
// closed once the child's Wait returned (so every line it printed is in
// lines.C); WaitLine then drains what is left and returns ErrExited.
func WaitLine(lines *Lines, exited <-chan struct{}, timeout time.Duration, match func(string) bool) (string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line := <-lines.C:
			if match(line) {
				return line, nil
			}
		case <-exited:
			for {
				select {
				case line := <-lines.C:
					if match(line) {
						return line, nil
					}
				default:
					return "", ErrExited
				}
			}
		case <-timer.C:
			return "", ErrTimeout
		}
	}
}

// Buffer is a bytes.Buffer safe for a child's stderr and a reader at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Proc is a child process of a crash test: the test binary re-executed
// with -test.run=^$ (its TestMain switches to the child's role by an
// environment variable).
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Hint is added to the failure when the child exits before a marker.
	Hint   string
	stdin  io.WriteCloser
	out    *Lines
	stderr Buffer
	exited chan struct{}
	err    error // of Wait, valid after exited is closed
}

// Start starts the test binary as a child with env added to the
// environment. The child should exit when its stdin closes, so a parent
// that dies leaves no consumer behind. It is SIGKILLed when the test ends
// at the latest, and its output is logged if the test failed.
func Start(t *testing.T, name string, env []string) *Proc {
	t.Helper()
	p := &Proc{Name: name, out: NewLines(4096), exited: make(chan struct{})}
	p.Cmd = exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, &p.stderr
	var err error
	if p.stdin, err = p.Cmd.StdinPipe(); err != nil {
		t.Fatalf("child %s: %v", name, err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("child %s: %v", name, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("child %s stdout:\n%s\nstderr:\n%s", p.Name, p.out.All(), p.stderr.String())
		}
	})
	return p
}

// Exited is closed once the child has exited and been reaped; then
// p.Cmd.ProcessState holds its exit status.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Kill SIGKILLs the child (no-op once it has exited) and reaps it.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.Cmd.Process.Kill() // SIGKILL: no deferred code, no graceful close
		<-p.exited
	}
	_ = p.stdin.Close()
}

// WaitFor reads the child's stdout until a line starting with one of
// prefixes and returns it. It fails the test when the child exits first or
// timeout passes.
func (p *Proc) WaitFor(t *testing.T, timeout time.Duration, prefixes ...string) string {
	t.Helper()
	line, err := WaitLine(p.out, p.exited, timeout, func(line string) bool {
		for _, pre := range prefixes {
			if strings.HasPrefix(line, pre) {
				return true
			}
		}
		return false
	})
	switch {
	case errors.Is(err, ErrExited):
		t.Fatalf("child %s exited (%v) before printing %q%s\nstdout:\n%s\nstderr:\n%s",
			p.Name, p.err, prefixes, p.Hint, p.out.All(), p.stderr.String())
	case err != nil:
		t.Fatalf("child %s did not print %q within %v\nstdout:\n%s\nstderr:\n%s",
			p.Name, prefixes, timeout, p.out.All(), p.stderr.String())
	}
	return line
}

// MaxLife ends a child that nobody killed (a bug in a test).
const MaxLife = 90 * time.Second

// ChildContext is the child's side: a context bounded by MaxLife, and the
// process exits as soon as its parent is gone (its stdin, which Start
// keeps open, reaches EOF), so no child outlives the test that started it.
func ChildContext() (context.Context, context.CancelFunc) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0) // the parent is gone
	}()
	return context.WithTimeout(context.Background(), MaxLife)
}
