package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Deadlines of the waits of the parent.
const (
	markerTimeout   = 20 * time.Second // an armed child reaches its crash point
	progressTimeout = 20 * time.Second // a child commits a reservation
	settleTimeout   = 45 * time.Second // the last child settles everything
	stopTimeout     = 10 * time.Second // the last child exits on SIGINT
)

// plan is the crash point of each kill ("" for a random moment): the three
// crash points first, with random kills between them and after them.
func plan(kills int) []string {
	p := make([]string, kills)
	for i, point := range []string{pointBeforeEffect, pointInTx, pointAfterCommit} {
		p[2*i] = point
	}
	return p
}

// consumeWithKills runs the consumer as a child process, SIGKILLs it as
// planned, restarting it each time, and lets a last one run until every
// message is settled. It returns the number of kills.
func consumeWithKills(ctx context.Context, cfg config, n names, db *sql.DB, b *broker, bt batch) (int, error) {
	out := &lockedWriter{w: cfg.out}
	kills := 0
	for i, point := range plan(cfg.kills) {
		c, err := startChild(ctx, cfg, out, n, point)
		if err != nil {
			return kills, err
		}
		err = killAt(ctx, out, db, n, c, i+1, point)
		if err != nil {
			_ = c.kill() // whatever state it is in: nothing outlives the run
			return kills, err
		}
		kills++
	}

	c, err := startChild(ctx, cfg, out, n, "")
	if err != nil {
		return kills, err
	}
	start := time.Now()
	err = waitSettled(ctx, out, db, n, b, bt)
	if err != nil {
		_ = c.kill()
		return kills, err
	}
	if err := c.stop(); err != nil {
		return kills, err
	}
	committed, _ := committedRows(ctx, db, n)
	say(out, "settled in %v after the last restart: %d reservations committed; the consumer stopped on SIGINT",
		time.Since(start).Round(100*time.Millisecond), committed)
	return kills, nil
}

// killAt kills child number i at point, or at a random moment once it has
// committed a reservation when point is "".
func killAt(ctx context.Context, out io.Writer, db *sql.DB, n names, c *child, i int, point string) error {
	if point == "" {
		before, err := committedRows(ctx, db, n)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(progressTimeout)
		for {
			now, err := committedRows(ctx, db, n)
			if err != nil {
				return err
			}
			if now > before {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("kill %d: the consumer committed nothing in %v (%d committed in all)", i, progressTimeout, now)
			}
			select {
			case <-c.exited:
				return fmt.Errorf("kill %d: the consumer exited by itself: %w", i, c.wait())
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		if err := c.kill(); err != nil {
			return fmt.Errorf("kill %d: %w", i, err)
		}
		committed, _ := committedRows(ctx, db, n)
		say(out, "kill %d: SIGKILL at a random moment (%d reservations committed so far)", i, committed)
		return nil
	}

	var id string
	select {
	case id = <-c.markers:
	case <-c.exited:
		return fmt.Errorf("kill %d: the consumer exited before it reached %s: %w", i, point, c.wait())
	case <-time.After(markerTimeout):
		return fmt.Errorf("kill %d: the consumer did not reach %s in %v", i, point, markerTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := c.kill(); err != nil {
		return fmt.Errorf("kill %d: %w", i, err)
	}
	// What the database holds of that reservation right after the kill:
	// nothing before COMMIT, one row after it.
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+n.reservations+` WHERE reservation_id = $1`, id).Scan(&rows); err != nil {
		return err
	}
	want := 0
	if point == pointAfterCommit {
		want = 1
	}
	say(out, "kill %d: SIGKILL at %s, reservation %s (%d reservation rows for it after the kill, want %d)", i, point, id, rows, want)
	if rows != want {
		return fmt.Errorf("kill %d at %s: %d reservation rows for %s, want %d", i, point, rows, id, want)
	}
	return nil
}

// waitSettled waits until both durable consumers have nothing left to
// deliver or to have acked, and every reservation is committed or
// dead-lettered.
func waitSettled(ctx context.Context, out io.Writer, db *sql.DB, n names, b *broker, bt batch) error {
	deadline := time.Now().Add(settleTimeout)
	for {
		var state []string
		settled := true
		for _, c := range [][2]string{{n.consumer, n.topic}, {n.deadConsumer, n.deadTopic}} {
			pending, ackPending, ok, err := b.pending(ctx, n.stream, c[0], c[1])
			if err != nil {
				return err
			}
			state = append(state, fmt.Sprintf("%s: exists=%v pending=%d ack_pending=%d", c[0], ok, pending, ackPending))
			settled = settled && ok && pending == 0 && ackPending == 0
		}
		t, err := readTally(ctx, db, n)
		if err != nil {
			return err
		}
		lost := t.lost(bt)
		if settled && len(lost) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(lost)
			say(out, "not settled: %s", strings.Join(state, "; "))
			say(out, "neither committed nor dead-lettered (%d): %v", len(lost), lost[:min(len(lost), 10)])
			return fmt.Errorf("messages still unsettled after %v (%d reservations unaccounted for)", settleTimeout, len(lost))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// child is one consumer process.
type child struct {
	cmd     *exec.Cmd
	markers chan string   // the reservation id of the crash point's marker
	exited  chan struct{} // closed once its stdout is closed: it exited
	once    sync.Once
	err     error
}

// startChild starts the consumer, armed at point (none for "").
func startChild(ctx context.Context, cfg config, out io.Writer, n names, point string) (*child, error) {
	// The child is also killed and waited for explicitly on every path,
	// before the run's tables and stream are removed.
	cmd := exec.CommandContext(ctx, cfg.child, "-consume", "-suffix", n.suffix)
	cmd.Env = append(os.Environ(),
		postgresEnv+"="+cfg.postgresURL, natsEnv+"="+cfg.natsURL, crashAtEnv+"="+point)
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the consumer %s: %w", cfg.child, err)
	}
	c := &child{cmd: cmd, markers: make(chan string, 1), exited: make(chan struct{})}
	go func() {
		defer close(c.exited)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) == 3 && f[0] == crashMarker && f[1] == point {
				select {
				case c.markers <- f[2]:
				default:
				}
				continue
			}
			say(out, "consumer: %s", lines.Text())
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return c, nil
}

// wait reaps the child once its output is closed, and returns how it ended.
func (c *child) wait() error {
	c.once.Do(func() {
		<-c.exited
		c.err = c.cmd.Wait()
	})
	return c.err
}

// kill SIGKILLs the child and reaps it; it fails unless SIGKILL is what
// ended it.
func (c *child) kill() error {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	err := c.wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("the consumer had exited before the kill: %w", err)
}

// stop interrupts the child and waits for it to exit cleanly; after
// stopTimeout it kills it.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.exited:
		if err := c.wait(); err != nil {
			return fmt.Errorf("the consumer did not stop cleanly: %w", err)
		}
		return nil
	case <-time.After(stopTimeout):
		_ = c.kill()
		return fmt.Errorf("the consumer did not stop within %v of SIGINT", stopTimeout)
	}
}

// lockedWriter serializes the lines of the parent and of its children's
// output readers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
