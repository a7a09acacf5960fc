// Command surely is the operator CLI of surely: it lists, shows, replays and
// purges archived dead letters, and shows the dedup store's record of one
// operation. Run "surely --help" for the commands (the exit statuses are
// listed there).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The first Ctrl-C lets the command stop cleanly (a replay
			// saves its cursor); from now on a second one ends the
			// process at once.
			stop()
			fmt.Fprintln(os.Stderr, "surely: interrupted, stopping cleanly (Ctrl-C again to quit at once)")
		case <-finished:
		}
	}()
	code := execute(ctx, newApp(os.Stdout, os.Stderr, os.Getenv), os.Args[1:])
	close(finished)
	stop()
	os.Exit(code)
}
