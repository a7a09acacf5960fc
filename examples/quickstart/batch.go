package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/idempotency"
)

// order is one published message: its operation key ("" for none) and body.
type order struct{ key, body string }

// op names an operation by key and body: a key reused with another body is
// another operation (that one must end dead-lettered as a conflict).
func (o order) op() string { return o.key + "|" + o.body }

// makeBatch: 30 payments, every fifth sent twice, every seventh failing its
// first attempt, 2 poison messages, one without a key, and one reusing a
// key with another amount.
func makeBatch() []order {
	var batch []order
	for i := 1; i <= 30; i++ {
		o := order{fmt.Sprintf("pay-%d", i), fmt.Sprintf("charge %d EUR", i)}
		if i%7 == 0 {
			o.body = "flaky " + o.body
		}
		batch = append(batch, o)
		if i%5 == 0 {
			batch = append(batch, o) // the producer retried its publish
		}
	}
	return append(batch,
		order{"pay-poison-1", "poison: card 0000"}, order{"pay-poison-2", "poison: card 1111"},
		order{"", "charge without a key"},
		order{"pay-1", "charge 1000 EUR"},
	)
}

func publish(ctx context.Context, natsURL string, batch []order) error {
	pub, err := surelynats.NewPublisher(natsURL)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	for _, o := range batch {
		msg := message.NewMessage(watermill.NewUUID(), []byte(o.body))
		if o.key != "" {
			msg.Metadata.Set(idempotency.DefaultMetadataKey, o.key)
		}
		msg.SetContext(ctx)
		if err := pub.Publish(topic, msg); err != nil {
			return err
		}
	}
	return nil
}

// waitSettled waits until the durable consumer has nothing left to
// deliver or ack, and every operation is charged or dead-lettered.
func waitSettled(ctx context.Context, b *broker, a *app, batch []order) error {
	for {
		done, err := b.settled(ctx, consumerName, topic)
		if err != nil {
			return err
		}
		if done && a != nil {
			missing, err := a.unaccounted(ctx, batch)
			if err != nil {
				return err
			}
			done = len(missing) == 0
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			if info, err := b.info(context.WithoutCancel(ctx), consumerName, topic); err == nil {
				fmt.Printf("consumer %s: pending=%d ack_pending=%d redelivered=%d delivered=%d filter=%q\n", consumerName, info.NumPending, info.NumAckPending, info.NumRedelivered, info.Delivered.Consumer, info.Config.FilterSubject)
			}
			if a != nil {
				missing, _ := a.unaccounted(context.WithoutCancel(ctx), batch)
				fmt.Println("unaccounted:", missing)
			}
			return fmt.Errorf("messages still in flight: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unaccounted lists the operations neither charged nor dead-lettered.
func (a *app) unaccounted(ctx context.Context, batch []order) ([]string, error) {
	var missing []string
	seen := map[string]bool{}
	for _, o := range batch {
		if seen[o.op()] {
			continue
		}
		seen[o.op()] = true
		var n int
		err := a.db.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM charges WHERE op_key = ? AND body = ?) +
			(SELECT COUNT(*) FROM dead_letters WHERE op_key = ? AND body = ?)`, o.key, o.body, o.key, o.body).Scan(&n)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			missing = append(missing, o.op())
		}
	}
	return missing, nil
}

func report(ctx context.Context, a *app, batch []order) error {
	rows, err := a.db.QueryContext(ctx, `SELECT op_key, reason, error FROM dead_letters ORDER BY op_key`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var key, reason, msg string
		if err := rows.Scan(&key, &reason, &msg); err != nil {
			return err
		}
		fmt.Printf("dead letter: key=%q reason=%s error=%q\n", key, reason, msg)
	}
	if err := rows.Close(); err != nil {
		return err
	}

	count := func(q string, args ...any) int {
		var n int
		if err := a.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			fmt.Println("query:", err)
			return -1
		}
		return n
	}
	processed := count(`SELECT COUNT(DISTINCT op_key) FROM charges`)
	double := count(`SELECT COUNT(*) FROM (SELECT op_key FROM charges GROUP BY op_key HAVING COUNT(*) > 1)`)
	duplicates := count(`SELECT COUNT(*) FROM outcomes WHERE outcome = ?`, "duplicate")
	deadLettered := count(`SELECT COUNT(*) FROM dead_letters`)
	// retried: attempts that failed transiently or died (a kill), and were
	// tried again, from the attempt ledger of each operation.
	retried := 0
	keys := map[string]bool{}
	for _, o := range batch {
		keys[o.key] = o.key != ""
	}
	for key, ok := range keys {
		if !ok {
			continue
		}
		rec, err := a.store.Get(ctx, "charge-payments", key)
		if err != nil {
			continue
		}
		for _, h := range rec.History {
			if h.Result == idempotency.ResultFailed && h.Reason != "permanent" || h.Result == idempotency.ResultUnknown {
				retried++
			}
		}
	}
	missing, err := a.unaccounted(ctx, batch)
	if err != nil {
		return err
	}
	for _, m := range missing {
		fmt.Println("lost:", m)
	}
	fmt.Printf("summary: published=%d processed=%d duplicates=%d retried=%d dead_lettered=%d lost=%d double_effects=%d\n",
		len(batch), processed, duplicates, retried, deadLettered, len(missing), double)
	if len(missing) != 0 || double != 0 {
		return fmt.Errorf("%d operations lost, %d charged twice", len(missing), double)
	}
	return nil
}
