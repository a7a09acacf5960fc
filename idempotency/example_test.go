package idempotency_test

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
)

// An extractor that takes the operation key from a JSON field of the
// payload, falling back to the idempotency_key metadata entry.
func ExampleNewExtractor() {
	ex, err := idempotency.NewExtractor(idempotency.WithSources(
		idempotency.FromJSONField("payment_id"),
		idempotency.FromMetadata(idempotency.DefaultMetadataKey),
	))
	if err != nil {
		panic(err)
	}
	msg := message.NewMessage("0190b5d2-7c4e-7a10-8000-000000000001", []byte(`{"payment_id":"pay-42","amount":10}`))
	id, err := ex.Extract(msg)
	if err != nil {
		panic(err)
	}
	fmt.Println(id.Key)

	noKey := message.NewMessage("0190b5d2-7c4e-7a10-8000-000000000002", []byte(`{"amount":10}`))
	_, err = ex.Extract(noKey)
	fmt.Println(err != nil)
	// Output:
	// pay-42
	// true
}
