package middleware_test

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
)

// Dedup on its own: a duplicate of a completed operation is acked without
// running the handler, and a failed attempt is not taken for a duplicate.
func ExampleDedup() {
	store, _ := memstore.New()
	dedup, err := middleware.Dedup(store, "reserve-stock")
	if err != nil {
		fmt.Println(err)
		return
	}
	runs := 0
	h := dedup(func(msg *message.Message) ([]*message.Message, error) {
		runs++
		if runs == 1 {
			return nil, fmt.Errorf("warehouse API timed out")
		}
		return nil, nil
	})
	deliver := func() error {
		msg := message.NewMessage("uuid-1", []byte(`{"sku":"A-1","qty":2}`))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, "reservation-17")
		_, err := h(msg)
		return err
	}
	fmt.Println("1st delivery:", deliver())
	fmt.Println("2nd delivery:", deliver())
	fmt.Println("3rd delivery:", deliver())
	fmt.Println("handler runs:", runs)
	// Output:
	// 1st delivery: warehouse API timed out
	// 2nd delivery: <nil>
	// 3rd delivery: <nil>
	// handler runs: 2
}
