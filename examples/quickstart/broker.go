package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	surelynats "github.com/surely-dev/surely/adapters/nats"
)

const (
	stream       = "PAYMENTS"
	topic        = "payments"
	deadTopic    = "payments.dead"
	consumerName = "quickstart"
)

// broker is an embedded NATS server with JetStream, on a random loopback
// port, storing in dir.
type broker struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startBroker(dir string) (*broker, error) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS did not start")
	}
	b := &broker{srv: srv}
	if b.nc, err = nats.Connect(srv.ClientURL()); err != nil {
		b.Stop()
		return nil, err
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		b.Stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := surelynats.EnsureStream(ctx, b.nc, jetstream.StreamConfig{Name: stream, Subjects: []string{topic, deadTopic}}); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

func (b *broker) info(ctx context.Context, consumer, topic string) (*jetstream.ConsumerInfo, error) {
	c, err := b.js.Consumer(ctx, stream, surelynats.ConsumerName(consumer, topic))
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

func (b *broker) URL() string { return b.srv.ClientURL() }

// settled reports whether the durable consumer of topic has no message left
// to deliver or to ack. A consumer that does not exist yet is not settled.
func (b *broker) settled(ctx context.Context, consumer, topic string) (bool, error) {
	c, err := b.js.Consumer(ctx, stream, surelynats.ConsumerName(consumer, topic))
	if err != nil {
		return false, nil //nolint:nilerr // not created yet: not settled
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}

func (b *broker) Stop() {
	if b.nc != nil {
		b.nc.Close()
	}
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}
