// Command quickstart runs surely end to end with no server at all: a
// GoChannel broker and the in-memory store. It publishes orders including
// duplicates, a handler that fails transiently, and poison messages, then
// prints what happened to each and a final summary line:
//
//	summary: published=N processed=N duplicates=N retried=N dead_lettered=N lost=0
//
// lost counts published operations that were neither processed nor
// dead-lettered; surely's promise is that it stays 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// ledger is the business state: what the handler charged, by order.
type ledger struct {
	mu       sync.Mutex
	charged  map[string]int // "key|payload" → number of effects
	flaky    map[string]int // failures injected so far, by key
	outcomes map[middleware.Outcome]int
	dead     map[string]string // "key|payload" → reason
	retried  int
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 256}, logger)
	defer func() { _ = pubSub.Close() }()

	store, err := memstore.New()
	if err != nil {
		return err
	}
	policy, err := retry.NewPolicy(
		retry.WithMaxAttempts(3),
		retry.WithInProcessAttempts(2),
		retry.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		retry.WithMaxInProcessTime(time.Second),
	)
	if err != nil {
		return err
	}
	// Only the metadata key counts: a message without one is dead-lettered
	// (reason no_key) instead of being deduplicated by its UUID.
	extractor, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromMetadata(idempotency.DefaultMetadataKey)))
	if err != nil {
		return err
	}

	l := &ledger{charged: map[string]int{}, flaky: map[string]int{}, outcomes: map[middleware.Outcome]int{}, dead: map[string]string{}}

	charge := func(msg *message.Message) ([]*message.Message, error) {
		key := idempotency.KeyFrom(msg.Context())
		body := string(msg.Payload)
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case strings.HasPrefix(body, "poison"):
			return nil, retry.Permanent(errors.New("card number is not valid"))
		case strings.HasPrefix(body, "flaky") && l.flaky[key] < 1:
			l.flaky[key]++
			l.retried++
			return nil, errors.New("payment gateway timed out")
		}
		l.charged[key+"|"+body]++
		return nil, nil
	}

	h, err := handler.New(charge,
		handler.WithStore(store, "charge-orders"),
		handler.WithDeadLetter(pubSub, "orders.dead"),
		handler.WithPolicy(policy),
		handler.WithIdentity(extractor, middleware.RejectMissingKey),
		handler.WithLease(5*time.Second),
		handler.WithLogger(slog.New(slog.DiscardHandler)),
		handler.WithOnOutcome(func(_ context.Context, p middleware.OutcomeParams) middleware.OutcomeResult {
			l.mu.Lock()
			l.outcomes[p.Outcome]++
			l.mu.Unlock()
			return middleware.OutcomeResult{}
		}),
	)
	if err != nil {
		return err
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	router.AddConsumerHandler("charge-orders", "orders", pubSub, handler.NoPublish(h))

	dead, err := pubSub.Subscribe(ctx, "orders.dead")
	if err != nil {
		return err
	}
	go func() {
		for m := range dead {
			l.mu.Lock()
			l.dead[m.Metadata.Get(idempotency.DefaultMetadataKey)+"|"+string(m.Payload)] = m.Metadata.Get(dlq.KeyReason)
			l.mu.Unlock()
			fmt.Printf("dead letter: key=%q reason=%s error=%q attempts=%s\n",
				m.Metadata.Get(dlq.KeyOperationKey), m.Metadata.Get(dlq.KeyReason),
				m.Metadata.Get(dlq.KeyError), m.Metadata.Get(dlq.KeyAttempts))
			m.Ack()
		}
	}()

	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	// The batch: 20 orders, 5 of them sent twice, 3 flaky ones, 2 poison
	// messages, one without a key, one reusing a key with another payload.
	type order struct{ key, body string }
	var batch []order
	for i := 1; i <= 20; i++ {
		body := fmt.Sprintf("order-%d", i)
		if i%7 == 0 {
			body = "flaky-" + body
		}
		batch = append(batch, order{fmt.Sprintf("order-%d", i), body})
		if i%4 == 0 {
			batch = append(batch, order{fmt.Sprintf("order-%d", i), body}) // duplicate delivery
		}
	}
	batch = append(batch,
		order{"order-poison-1", "poison-1"}, order{"order-poison-2", "poison-2"},
		order{"", "order-without-key"},
		order{"order-1", "order-1-but-changed"},
	)
	expected := map[string]bool{} // "key|payload" of operations that must end processed or dead-lettered
	for _, o := range batch {
		msg := message.NewMessage(watermill.NewUUID(), []byte(o.body))
		if o.key != "" {
			msg.Metadata.Set(idempotency.DefaultMetadataKey, o.key)
		}
		expected[o.key+"|"+o.body] = true
		if err := pubSub.Publish("orders", msg); err != nil {
			return err
		}
		// Give the duplicate a chance to arrive after its original completed.
		time.Sleep(2 * time.Millisecond)
	}

	// Wait until every delivery has ended in an ack.
	want := len(batch)
	for {
		l.mu.Lock()
		done := l.outcomes[middleware.OutcomeProcessed] + l.outcomes[middleware.OutcomeDuplicate] + l.outcomes[middleware.OutcomeDeadLettered]
		deadSeen := len(l.dead)
		l.mu.Unlock()
		if done >= want && deadSeen >= l.outcomes[middleware.OutcomeDeadLettered] {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out: %d of %d deliveries acked", done, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := router.Close(); err != nil {
		return err
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	for op := range expected {
		if l.charged[op] == 0 && l.dead[op] == "" {
			lost++
			fmt.Printf("lost: %s\n", op)
		}
	}
	double := 0
	for _, n := range l.charged {
		if n > 1 {
			double++
		}
	}
	fmt.Printf("summary: published=%d processed=%d duplicates=%d retried=%d dead_lettered=%d lost=%d double_effects=%d\n",
		len(batch), l.outcomes[middleware.OutcomeProcessed], l.outcomes[middleware.OutcomeDuplicate], l.retried,
		l.outcomes[middleware.OutcomeDeadLettered], lost, double)
	if lost != 0 || double != 0 {
		return errors.New("a message was lost or its effect doubled")
	}
	return nil
}
