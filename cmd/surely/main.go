// Command surely is the operator CLI of surely: it lists, shows, replays and
// purges archived dead letters, shows the dedup store's record of one
// operation or lists its records by state (ops ls), and creates or updates
// the SQL schemas (migrate). Run "surely --help" for the commands (the exit
// statuses are listed there).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"
)

func main() {
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	finish := watchInterrupt(ctx, stop, os.Stderr)
	code := execute(ctx, newApp(os.Stdout, os.Stderr, os.Getenv), os.Args[1:])
	finish()
	os.Exit(code)
}

// watchInterrupt announces on stderr that ctx, ended by a first interrupt,
// makes the command stop cleanly, and calls stop so that a second
// interrupt ends the process at once. The returned finish, called when the
// command returned, ends the watch: it calls stop, and returns once the
// watch is over, so nothing is printed after it.
//
// finish's own stop also ends ctx: the watch tells that apart from an
// interrupt by finished, closed before stop is called.
func watchInterrupt(ctx context.Context, stop context.CancelFunc, stderr io.Writer) (finish func()) {
	finished := make(chan struct{})
	over := make(chan struct{})
	go func() {
		defer close(over)
		select {
		case <-ctx.Done():
			select {
			case <-finished:
				return // the command ended by itself
			default:
			}
			// The first Ctrl-C lets the command stop cleanly (a replay
			// saves its cursor); from now on a second one ends the
			// process at once.
			stop()
			_, _ = fmt.Fprintln(stderr, "surely: interrupted, stopping cleanly (Ctrl-C again to quit at once)")
		case <-finished:
		}
	}()
	return func() {
		close(finished)
		stop()
		<-over
	}
}

// quietRedis is go-redis's logger in surely: its pool repeats a refused
// dial on stderr, while the command's own error says it once, with what
// to check.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
