package redisstore_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/redisstore"
)

// The Redis store behind handler.New. The store never closes the client.
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = client.Close() }()

	store, err := redisstore.New(ctx, client,
		redisstore.WithPrefix("billing:"),
		redisstore.WithBatching(64), // concurrent handlers share round trips
	)
	if err != nil {
		log.Fatal(err) // Redis unreachable, or scripts could not be loaded
	}
	_ = handler.WithStore(store, "charge-payments")
}
