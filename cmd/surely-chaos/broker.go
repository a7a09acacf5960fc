package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	surelyamqp "github.com/surely-dev/surely/adapters/amqp"
	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/adapters/redisstream"
	"github.com/surely-dev/surely/delivery"
)

// Broker settings of the consumers: short, so that a killed or paused
// consumer's messages come back within a few seconds.
const (
	natsAckWait    = time.Second
	amqpHeartbeat  = time.Second // the broker drops a stopped consumer's connection after a few
	redisAckWait   = 2 * time.Second
	redisClaimTick = 500 * time.Millisecond
)

// natsOptions make every NATS connection ride out a restart of the server.
func natsOptions(name string) []nats.Option {
	return []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.Timeout(3 * time.Second)}
}

func amqpConfig(name string) *amqp091.Config {
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName(name)
	return &amqp091.Config{Heartbeat: amqpHeartbeat, Locale: "en_US", Properties: props}
}

func redisOptions(rawURL string) (*redis.UniversalOptions, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", redisEnv, rawURL, err)
	}
	return &redis.UniversalOptions{Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password}, nil
}

func newPublisher(kind, url, name string) (message.Publisher, error) {
	switch kind {
	case brokerNATS:
		return surelynats.NewPublisher(url, surelynats.WithNATSOptions(natsOptions(name)...))
	case brokerRabbitMQ:
		return surelyamqp.NewPublisher(url, surelyamqp.WithAMQPConfig(amqpConfig(name)))
	default:
		opts, err := redisOptions(url)
		if err != nil {
			return nil, err
		}
		return redisstream.NewPublisher(opts)
	}
}

// newSubscriber returns a subscriber of consumer group group.
func newSubscriber(kind, url, group, name string, concurrency int) (message.Subscriber, error) {
	switch kind {
	case brokerNATS:
		return surelynats.NewSubscriber(url, group, delivery.WithAckWait(natsAckWait),
			delivery.WithConcurrency(concurrency), surelynats.WithNATSOptions(natsOptions(name)...),
			delivery.WithLogger(debugLogger()))
	case brokerRabbitMQ:
		return surelyamqp.NewSubscriber(url, delivery.WithConcurrency(concurrency),
			surelyamqp.WithAMQPConfig(amqpConfig(name)), delivery.WithLogger(debugLogger()))
	default:
		opts, err := redisOptions(url)
		if err != nil {
			return nil, err
		}
		return redisstream.NewSubscriber(opts, group, delivery.WithAckWait(redisAckWait),
			redisstream.WithClaimInterval(redisClaimTick), delivery.WithLogger(debugLogger()))
	}
}

// prepareBroker creates what the broker needs before the first publish:
// the NATS stream capturing both topics. (RabbitMQ queues and Redis streams
// are created by the first publish or subscribe.)
func prepareBroker(ctx context.Context, kind, url string, n names) error {
	if kind != brokerNATS {
		return nil
	}
	nc, err := nats.Connect(url, natsOptions("surely-chaos setup")...)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	return surelynats.EnsureStream(ctx, nc, jetstream.StreamConfig{
		Name: n.stream, Description: "surely-chaos run " + n.suffix,
		Subjects: []string{n.topic, n.deadTopic},
	})
}

// cleanupBroker deletes the run's queues, streams and consumer groups,
// with a deadline of its own. What was never created is not an error.
func cleanupBroker(kind, url string, n names) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	switch kind {
	case brokerNATS:
		nc, err := nats.Connect(url, nats.Timeout(3*time.Second), nats.MaxReconnects(0))
		if err != nil {
			return fmt.Errorf("cleanup: nats: %w", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		if err := js.DeleteStream(ctx, n.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("cleanup: delete stream %s: %w", n.stream, err)
		}
		return nil
	case brokerRabbitMQ:
		conn, err := amqp091.DialConfig(url, *amqpConfig("surely-chaos cleanup"))
		if err != nil {
			return fmt.Errorf("cleanup: rabbitmq: %w", err)
		}
		defer func() { _ = conn.Close() }()
		var errs []error
		for _, q := range []string{n.topic, n.deadTopic} {
			ch, err := conn.Channel()
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				var ae *amqp091.Error
				if !errors.As(err, &ae) || ae.Code != amqp091.NotFound {
					errs = append(errs, fmt.Errorf("cleanup: delete queue %s: %w", q, err))
				}
				continue // the channel is closed after an error
			}
			_ = ch.Close()
		}
		return errors.Join(errs...)
	default:
		opts, err := redisOptions(url)
		if err != nil {
			return err
		}
		c := redis.NewUniversalClient(opts)
		defer func() { _ = c.Close() }()
		if err := c.Del(ctx, n.topic, n.deadTopic).Err(); err != nil {
			return fmt.Errorf("cleanup: delete streams %s, %s: %w", n.topic, n.deadTopic, err)
		}
		return nil
	}
}

// checkBroker fails early, with the variable to set, when a shared broker
// does not answer.
func checkBroker(ctx context.Context, kind, url string) error {
	switch kind {
	case brokerRabbitMQ:
		conn, err := amqp091.DialConfig(url, *amqpConfig("surely-chaos check"))
		if err != nil {
			return fmt.Errorf("needs RabbitMQ at %s (set %s): %w", url, amqpEnv, err)
		}
		return conn.Close()
	case brokerRedis:
		opts, err := redisOptions(url)
		if err != nil {
			return err
		}
		c := redis.NewUniversalClient(opts)
		defer func() { _ = c.Close() }()
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := c.Ping(pctx).Err(); err != nil {
			return fmt.Errorf("needs Redis at %s for Redis Streams (set %s): %w", url, redisEnv, err)
		}
	}
	return nil
}
