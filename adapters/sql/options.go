package sql

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// ErrInvalidTopic is returned for a topic that cannot name a table (see
// ValidTopic).
var ErrInvalidTopic = errors.New("sql: invalid topic")

// ErrDeliveryExpired is returned by the delivery.Control's Extend when the
// delivery's ack wait has already passed (or it was settled): the message
// has gone back to the consumer group.
var ErrDeliveryExpired = errors.New("sql: delivery expired")

// batchSize is how many rows a consuming transaction reads unless
// WithBatchSize says otherwise (and what the Publisher's schema is built
// with; it reads no rows).
const batchSize = 1

// minAckWait is the shortest WithAckWait accepted.
const minAckWait = 100 * time.Millisecond

// retryInterval is how long a subscription waits after a failed query (the
// database is down) before it queries again; watermill-sql logs each
// failure. A serialization failure between two consumers of a group is
// retried at once.
const retryInterval = time.Second

// Names under which this package's options record their values.
const (
	optAckWait        = "WithAckWait"
	optPollInterval   = "WithPollInterval"
	optResendInterval = "WithResendInterval"
	optBatchSize      = "WithBatchSize"
)

// WithAckWait sets how long a message handed out may stay unacked before
// its delivery is given up: the consuming transaction is rolled back, the
// handler's context cancelled, and the message goes back to the group
// (default 30s, at least 100ms). surely's dedup step pushes it back while
// the handler runs (delivery.Control.Extend), so it need not exceed the
// longest handler, only the gap between two extensions.
func WithAckWait(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutAtLeast(delivery.ErrInvalidOption, optAckWait, "sql.WithAckWait", d, minAckWait)
	}
}

// WithPollInterval sets how long an idle subscription waits before it
// looks for new rows again (default 1s, at least 1ms): the latency of a
// message published to an idle topic.
func WithPollInterval(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutAtLeast(delivery.ErrInvalidOption, optPollInterval, "sql.WithPollInterval", d, time.Millisecond)
	}
}

// WithResendInterval sets how long watermill-sql waits before it hands a
// nacked message out again (default 100ms, at least 1ms). surely's chain
// already waited (its backoff) before it nacked.
func WithResendInterval(d time.Duration) delivery.Option {
	return func(s *options.Set) error {
		return s.PutAtLeast(delivery.ErrInvalidOption, optResendInterval, "sql.WithResendInterval", d, time.Millisecond)
	}
}

// WithBatchSize sets how many rows one consuming transaction reads
// (default 1). Above 1, the acks of a batch commit together at its end: a
// crash, or an ack wait that passes, delivers the batch's acked messages
// again, and the transaction stays open for the whole batch.
func WithBatchSize(n int) delivery.Option {
	return func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: sql.WithBatchSize: %d is not positive", delivery.ErrInvalidOption, n)
		}
		s.Put(optBatchSize, n)
		return nil
	}
}

// subscriberConfig is what NewSubscriber's options set.
type subscriberConfig struct {
	group          string
	ackWait        time.Duration
	pollInterval   time.Duration
	resendInterval time.Duration
	batchSize      int
	closeTimeout   time.Duration
	logger         *slog.Logger
}

func newSubscriberConfig(group string, opts []delivery.Option) (subscriberConfig, error) {
	const who = "sql.NewSubscriber"
	c := subscriberConfig{group: group}
	if group == "" || len(group) > 255 {
		return c, fmt.Errorf("%w: %s: consumer group %q: a group has 1 to 255 bytes", delivery.ErrInvalidOption, who, group)
	}
	s, err := options.Apply(delivery.ErrInvalidOption, opts)
	if err != nil {
		return c, err
	}
	if err := s.Check(delivery.ErrInvalidOption, who, optAckWait, optPollInterval,
		optResendInterval, optBatchSize, options.CloseTimeout, options.Logger); err != nil {
		return c, err
	}
	if c.ackWait, err = options.GetAs(s, delivery.ErrInvalidOption, who, optAckWait, 30*time.Second); err != nil {
		return c, err
	}
	// An option whose name other adapters share was checked by this
	// package's option only if it came from it.
	if err := WithAckWait(c.ackWait)(&options.Set{}); err != nil {
		return c, err
	}
	c.pollInterval = options.Get(s, optPollInterval, time.Second)
	c.resendInterval = options.Get(s, optResendInterval, 100*time.Millisecond)
	c.batchSize = options.Get(s, optBatchSize, batchSize)
	c.closeTimeout = options.Get(s, options.CloseTimeout, delivery.DefaultCloseTimeout)
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}

// maxTopicLen keeps "watermill_offsets_" + topic within PostgreSQL's 63
// bytes: a longer name would be truncated, silently, and two long topics
// with the same first 45 bytes would share their tables.
const maxTopicLen = 63 - len("watermill_offsets_")

var topicRE = regexp.MustCompile(`^[A-Za-z0-9_.:$-]+$`)

// ValidTopic reports, as an error wrapping ErrInvalidTopic, whether topic
// cannot be used: it names the tables "watermill_<topic>" and
// "watermill_offsets_<topic>", so it must have 1 to 45 bytes of letters,
// digits, '_', '-', '.', ':' and '$' (watermill-sql's set).
func ValidTopic(topic string) error {
	if !topicRE.MatchString(topic) || len(topic) > maxTopicLen {
		return fmt.Errorf("%w %q: 1 to %d bytes of letters, digits, '_', '-', '.', ':' and '$'", ErrInvalidTopic, topic, maxTopicLen)
	}
	return nil
}
