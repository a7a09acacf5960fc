package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	surelynats "github.com/surely-dev/surely/adapters/nats"
)

// broker is the parent's own connection to NATS, for the run's stream and
// consumers only.
type broker struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// connectNATS connects and checks that JetStream answers; an unreachable
// server is an error that says which variable to set.
func connectNATS(rawURL string) (*broker, error) {
	unavailable := func(err error) error {
		return fmt.Errorf("needs NATS with JetStream at %s (set %s): %w", redact(rawURL), natsEnv, err)
	}
	nc, err := nats.Connect(rawURL, nats.Timeout(3*time.Second), nats.MaxReconnects(0), nats.Name("surely inventory example"))
	if err != nil {
		return nil, unavailable(err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = js.AccountInfo(ctx)
		cancel()
	}
	if err != nil {
		nc.Close()
		return nil, unavailable(err)
	}
	return &broker{nc: nc, js: js}, nil
}

func (b *broker) Close() { b.nc.Close() }

// ensureStream creates the run's stream, capturing its two subjects.
func (b *broker) ensureStream(ctx context.Context, n names) error {
	return surelynats.EnsureStream(ctx, b.nc, jetstream.StreamConfig{
		Name:        n.stream,
		Description: "surely examples/inventory run " + n.suffix + " (deleted at its end)",
		Subjects:    []string{n.topic, n.deadTopic},
	})
}

// deleteStream deletes the run's consumers and its stream, with a
// deadline of its own: it also runs after the run's context ended. What
// was never created is not an error.
func (b *broker) deleteStream(n names) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	for _, c := range [][2]string{{n.consumer, n.topic}, {n.deadConsumer, n.deadTopic}} {
		err := b.js.DeleteConsumer(ctx, n.stream, surelynats.ConsumerName(c[0], c[1]))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete consumer %s: %w", c[0], err))
		}
	}
	if err := b.js.DeleteStream(ctx, n.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		errs = append(errs, fmt.Errorf("delete stream %s: %w", n.stream, err))
	}
	return errors.Join(errs...)
}

// pending reports how many messages the durable consumer of topic has left
// to deliver or to have acked; ok is false while the consumer does not
// exist yet.
func (b *broker) pending(ctx context.Context, stream, consumer, topic string) (pending, ackPending int, ok bool, err error) {
	c, err := b.js.Consumer(ctx, stream, surelynats.ConsumerName(consumer, topic))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	return int(info.NumPending), info.NumAckPending, true, nil
}
