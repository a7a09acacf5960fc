package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopTimeout bounds a consumer's clean exit on SIGINT before it is killed.
const stopTimeout = 15 * time.Second

// child is one consumer process.
type child struct {
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	pause  chan [2]string // key, token of a PAUSE line
	fenced chan string    // key of a FENCED line
	exited chan struct{}  // closed once Wait returned
	err    error          // of Wait, valid after exited
	paused bool           // being paused (children.mu)
	ready  bool           // printed READY: its signal handlers are installed (children.mu)
	doomed bool           // picked for a kill (children.mu)
	net    *linkSet       // its proxies (-net), nil without
}

// children starts, kills and stops the consumer processes.
type children struct {
	exe    string
	args   []string
	env    string // JSON childConfig
	log    *logger
	mu     sync.Mutex
	live   []*child
	killed map[int]bool // pids killed with SIGKILL
	paused map[int]bool // pids paused (SIGSTOP) at least once
	exits  int          // consumers that exited on their own
	verb   bool
	// links, when set, gives every new consumer proxies of its own and
	// returns its configuration pointing at them (-net).
	links func() (string, *linkSet, error)
	rep   *reports
}

func newChildren(exe string, args []string, cfg childConfig, log *logger, verbose bool) (*children, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return &children{exe: exe, args: args, env: string(raw), log: log, killed: map[int]bool{}, paused: map[int]bool{}, verb: verbose,
		rep: newReports(log.start)}, nil
}

// start starts one more consumer.
func (cs *children) start() (*child, error) {
	// Not bound to a context: every path kills or stops it explicitly.
	cmd := exec.Command(cs.exe, cs.args...) //nolint:noctx // killed or stopped explicitly on every path
	env := cs.env
	var links *linkSet
	if cs.links != nil {
		var err error
		if env, links, err = cs.links(); err != nil {
			return nil, err
		}
	}
	cmd.Env = append(os.Environ(), childEnv+"="+env)
	started := false
	defer func() {
		if !started && links != nil {
			links.close()
		}
	}()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a consumer (%s): %w", cs.exe, err)
	}
	c := &child{cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, pause: make(chan [2]string, 1),
		fenced: make(chan string, 64), exited: make(chan struct{}), net: links}
	started = true
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			cs.log.say("consumer %d: %s", c.pid, lines.Text())
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		defer readers.Done()
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			switch {
			case len(f) == 3 && f[0] == linePause:
				select {
				case c.pause <- [2]string{f[1], f[2]}:
				default:
				}
			case len(f) == 2 && f[0] == lineFenced:
				cs.rep.leaseLost()
				select {
				case c.fenced <- f[1]:
				default:
				}
			case len(f) == 4 && f[0] == lineAcked:
				cs.rep.acked(f[1], f[2], f[3])
			case len(f) == 3 && f[0] == lineUnsure:
				cs.rep.unsure(f[1], f[2])
			case len(f) == 4 && f[0] == lineStats:
				cs.rep.stats(c.pid, f[1], f[2], f[3])
			case len(f) == 2 && f[0] == lineReady:
				cs.mu.Lock()
				c.ready = true
				cs.mu.Unlock()
			default:
				if cs.verb {
					cs.log.say("consumer %d: %s", c.pid, lines.Text())
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		readers.Wait() // Wait closes the pipes: only after both are read
		c.err = cmd.Wait()
		if c.net != nil {
			c.net.close()
		}
		close(c.exited)
	}()
	cs.mu.Lock()
	cs.live = append(cs.live, c)
	cs.mu.Unlock()
	return c, nil
}

// pick returns a live consumer that is neither being paused nor picked
// before, chosen by i (modulo their number), for a kill: it marks it
// doomed, so that no pause arms it in the moment before the kill.
func (cs *children) pick(i int) *child {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var free []*child
	for _, c := range cs.live {
		if !c.paused && !c.doomed {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		return nil
	}
	c := free[i%len(free)]
	c.doomed = true
	return c
}

// pickToPause picks a consumer as pick does, among those that printed
// READY (a SIGUSR1 sent to one started a moment ago, before it installed
// its handler, is lost or kills it), and marks it paused: no kill picks it
// until unpause. It returns nil when there is none.
func (cs *children) pickToPause(i int) *child {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var ready []*child
	for _, c := range cs.live {
		if !c.paused && !c.doomed && c.ready {
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	c := ready[i%len(ready)]
	c.paused = true
	cs.paused[c.pid] = true
	return c
}

func (cs *children) unpause(c *child) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.paused = false
}

func (cs *children) remove(c *child) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, l := range cs.live {
		if l == c {
			cs.live = append(cs.live[:i], cs.live[i+1:]...)
			return
		}
	}
}

// kill SIGKILLs c and reaps it.
func (cs *children) kill(c *child) error {
	cs.remove(c)
	_ = c.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies of SIGKILL too; be sure
	_ = c.cmd.Process.Kill()
	<-c.exited
	_ = c.stdin.Close()
	cs.mu.Lock()
	cs.killed[c.pid] = true
	cs.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("consumer %d had exited before the kill: %w", c.pid, c.err)
}

// restartExited replaces the consumers that exited on their own (a
// subscription that ended, a startup error), and reports how many.
func (cs *children) restartExited() (int, error) {
	cs.mu.Lock()
	var gone []*child
	for _, c := range cs.live {
		select {
		case <-c.exited:
			gone = append(gone, c)
		default:
		}
	}
	cs.mu.Unlock()
	for _, c := range gone {
		cs.remove(c)
		_ = c.stdin.Close()
		cs.mu.Lock()
		cs.exits++
		cs.mu.Unlock()
		cs.log.say("consumer %d exited on its own (%v); starting another", c.pid, c.err)
		if _, err := cs.start(); err != nil {
			return len(gone), err
		}
	}
	return len(gone), nil
}

// pickNet returns a live consumer with proxies, not being paused, chosen
// by i, for a network fault; nil when there is none.
func (cs *children) pickNet(i int) *child {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var ok []*child
	for _, c := range cs.live {
		if c.net != nil && !c.paused && !c.doomed {
			ok = append(ok, c)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	return ok[i%len(ok)]
}

// allNet returns the proxies of every live consumer.
func (cs *children) allNet() []*linkSet {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []*linkSet
	for _, c := range cs.live {
		if c.net != nil {
			out = append(out, c.net)
		}
	}
	return out
}

// wasKilled reports whether pid was killed with SIGKILL; wasPaused whether
// it was stopped past its lease at least once.
func (cs *children) wasKilled(pid int) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.killed[pid]
}

func (cs *children) wasPaused(pid int) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.paused[pid]
}

// stopAll interrupts every consumer and waits for them; those that do not
// exit within stopTimeout are killed.
func (cs *children) stopAll() {
	cs.mu.Lock()
	live := cs.live
	cs.live = nil
	cs.mu.Unlock()
	for _, c := range live {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Signal(os.Interrupt)
	}
	deadline := time.After(stopTimeout)
	for _, c := range live {
		select {
		case <-c.exited:
		case <-deadline:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		_ = c.stdin.Close()
	}
}

// logger writes the run's progress lines to stderr, one at a time.
type logger struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (l *logger) say(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = fmt.Fprintf(l.w, "[%6.1fs] "+format+"\n", append([]any{time.Since(l.start).Seconds()}, args...)...)
}

// waitLine waits for a value on ch, for c's exit or for the timeout.
func waitLine[T any](ctx context.Context, c *child, ch <-chan T, timeout time.Duration) (T, error) {
	var zero T
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-c.exited:
		return zero, fmt.Errorf("consumer %d exited: %w", c.pid, c.err)
	case <-t.C:
		return zero, fmt.Errorf("consumer %d: nothing within %v", c.pid, timeout)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
