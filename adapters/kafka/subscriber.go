package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/drain"
)

// Subscriber is a Watermill subscriber on a Kafka consumer group with safe
// defaults for at-least-once delivery (see the package doc). It wraps
// watermill-kafka's subscriber, which creates (and closes) a Sarama client
// per subscription.
type Subscriber struct {
	cfg     subscriberConfig
	brokers []string
	inner   *wmkafka.Subscriber

	closing   chan struct{} // stop handing out messages
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex // orders wg.Add in Subscribe before wg.Wait in Close
	closed bool
	wg     sync.WaitGroup // forwarders
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber in consumer group group on the Kafka
// cluster of brokers (host:port of one or more brokers). Every process with
// the same group shares the partitions of a topic; the group's committed
// offsets are where a restarted consumer resumes. It connects only when
// Subscribe is called. It takes WithMarshaler, WithSaramaConfig,
// delivery.WithCloseTimeout and delivery.WithLogger; any other option is
// refused with an error wrapping delivery.ErrInvalidOption.
func NewSubscriber(brokers []string, group string, opts ...delivery.Option) (*Subscriber, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: kafka.NewSubscriber: no brokers", delivery.ErrInvalidOption)
	}
	cfg, err := newSubscriberConfig(group, opts)
	if err != nil {
		return nil, err
	}
	inner, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           safeUnmarshaler{u: cfg.unmarshaler},
		OverwriteSaramaConfig: cfg.sarama,
		ConsumerGroup:         cfg.group,
		NackResendSleep:       nackResendSleep,
	}, watermill.NewSlogLogger(cfg.logger))
	if err != nil {
		return nil, fmt.Errorf("%w: kafka.NewSubscriber: %w", delivery.ErrInvalidOption, err)
	}
	return &Subscriber{
		cfg: cfg, brokers: append([]string(nil), brokers...), inner: inner,
		closing: make(chan struct{}),
	}, nil
}

// Subscribe joins the consumer group for topic and hands out its messages,
// one partition's messages one at a time, in offset order (the next one
// after the previous was acked). It fails with ErrNoTopic when the topic
// does not exist. The channel is closed when ctx is done or on Close, after
// the messages in flight were settled (see Close).
//
// The message context derives from ctx's values but is not cancelled with
// it: a handler still running at shutdown finishes and acks (see Close).
// It carries watermill-kafka's partition, offset, timestamp and key
// (wmkafka.MessagePartitionFromCtx and the like).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, delivery.ErrClosed
	}
	if err := s.checkTopic(topic); err != nil {
		return nil, err
	}
	ictx, icancel := context.WithCancel(context.WithoutCancel(ctx))
	in, err := s.inner.Subscribe(ictx, topic)
	if err != nil {
		icancel()
		return nil, fmt.Errorf("kafka: subscribe %q: %w", topic, err)
	}
	out := make(chan *message.Message)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		icancel()
		go drain.Chan(in)
		return nil, delivery.ErrClosed
	}
	s.wg.Add(1)
	go s.forward(ctx, topic, in, out, icancel)
	return out, nil
}

// checkTopic fails with ErrNoTopic when topic does not exist. Without it,
// watermill-kafka retries the missing topic every second, forever.
func (s *Subscriber) checkTopic(topic string) error {
	client, err := sarama.NewClient(s.brokers, s.cfg.sarama)
	if err != nil {
		return fmt.Errorf("kafka: connect: %w", err)
	}
	defer func() { _ = client.Close() }()
	parts, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) || err == nil && len(parts) == 0 {
		return fmt.Errorf("%w: %q (create it first: EnsureTopic)", ErrNoTopic, topic)
	}
	if err != nil {
		return fmt.Errorf("kafka: partitions of %q: %w", topic, err)
	}
	return nil
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// forward hands out the messages of one subscription and, when it ends
// (ctx done or Close), waits for those in flight to be settled before it
// stops watermill-kafka's consumer, so that their offsets are marked and
// committed when the group's session ends. Only forward sends on out and
// closes it.
func (s *Subscriber) forward(ctx context.Context, topic string, in <-chan *message.Message, out chan<- *message.Message, stop context.CancelFunc) {
	defer s.wg.Done()
	var inflight sync.WaitGroup
	handedOut := false
	abandon := make(chan struct{})
	defer func() {
		close(out)
		s.settle(ctx, topic, &inflight, abandon)
		if handedOut {
			// watermill-kafka marks an acked offset in its own goroutine,
			// which also watches the context stop cancels, and a select
			// between two ready cases picks either: let it mark first.
			time.Sleep(markGrace)
		}
		stop()
		drain.Chan(in) // until watermill-kafka's consumer has stopped
	}()
	for {
		var msg *message.Message
		var ok bool
		select {
		case msg, ok = <-in:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
		select {
		case out <- msg:
		case <-ctx.Done():
			return // not handed out: not acked, so not committed
		case <-s.closing:
			return
		}
		inflight.Add(1)
		handedOut = true
		go func() {
			defer inflight.Done()
			select {
			case <-msg.Acked():
			case <-msg.Nacked():
			case <-abandon:
			}
		}()
	}
}

// settle waits up to the close timeout for the messages handed out to be acked
// or nacked. watermill-kafka marks an acked message's offset right after
// the ack; a message still unsettled then is left unmarked (delivered
// again after a restart) and its handler's context is cancelled.
func (s *Subscriber) settle(ctx context.Context, topic string, inflight *sync.WaitGroup, abandon chan struct{}) {
	if drain.Wait(inflight, s.cfg.closeTimeout, abandon) {
		s.cfg.logger.WarnContext(ctx, "surely/kafka: messages still in flight at close; they will be delivered again", "topic", topic)
	}
}

// markGrace is how long a closing subscription waits, after its last
// message was settled, before it stops watermill-kafka's consumer.
const markGrace = 100 * time.Millisecond

// Close stops handing out messages, waits (up to the close timeout,
// delivery.WithCloseTimeout, default 30s) for those in flight to be acked
// or nacked, then leaves the consumer group, committing the offsets of the
// acked messages, and closes the Sarama clients. Messages not acked by
// then are delivered again to the group. Close is safe to call more than
// once (the router calls it too).
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.wg.Wait()
		s.closeErr = s.inner.Close()
	})
	return s.closeErr
}
