package redisarchive_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
)

// An archive on Redis with a 30-day retention, pruned hourly, listing what
// waits longer than an hour. (Not run as a test: it needs a server.)
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer func() { _ = client.Close() }() // yours: the archive never closes it

	arch, err := redisarchive.New(client,
		archive.WithPrefix("billing:dlq"),
		dlq.WithRetention(30*24*time.Hour), // default: keep everything
		dlq.WithLogger(slog.Default()),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() {
		tick := time.NewTicker(time.Hour)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = arch.Prune(ctx) // logs how many it deleted
			}
		}
	}()

	old, err := arch.List(ctx, archive.Filter{DeadLetteredBefore: time.Now().Add(-time.Hour)}, archive.Page{Limit: 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range old {
		fmt.Println(e.ID, e.OriginalTopic, e.Reason, e.Error)
	}
}
