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

// ErrInvalidTopic is returned for a topic that cannot name a table: a topic
// names the tables "watermill_<topic>" and "watermill_offsets_<topic>", so
// it must have 1 to 45 bytes of letters, digits, '_', '-', '.', ':' and '$'.
var ErrInvalidTopic = errors.New("sql: invalid topic")

// errDeliveryExpired is returned by the delivery.Control's Extend when the
// delivery's ack wait has already passed (or it was settled): the message
// has gone back to the consumer group.
var errDeliveryExpired = errors.New("sql: delivery expired")

// batchSize is how many rows a consuming transaction reads unless
// WithBatchSize says otherwise (and what the Publisher's schema is built
// with; it reads no rows).
const batchSize = 1

// minAckWait is the shortest delivery.WithAckWait accepted.
const minAckWait = 100 * time.Millisecond

// retryInterval is how long a subscription waits after a failed query (the
// database is down) before it queries again; watermill-sql logs each
// failure. A serialization failure between two consumers of a group is
// retried at once.
const retryInterval = time.Second

// Names of this package's options (see internal/options.Load): qualified
// with the package, so that another adapter's option of the same name is
// refused by name.
const (
	optPollInterval = "sql.WithPollInterval"
	optBatchSize    = "sql.WithBatchSize"
)

// WithPollInterval sets how long an idle subscription waits before it
// looks for new rows again (default 1s, at least 1ms): the latency of a
// message published to an idle topic.
func WithPollInterval(d time.Duration) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		return s.PutAtLeast(delivery.ErrInvalidOption, optPollInterval, optPollInterval, d, time.Millisecond)
	})
}

// WithBatchSize sets how many rows one consuming transaction reads
// (default 1). Above 1, the acks of a batch commit together at its end: a
// crash, or an ack wait that passes, delivers the batch's acked messages
// again, and the transaction stays open for the whole batch.
func WithBatchSize(n int) delivery.Option {
	return options.Func[options.Delivery](func(s *options.Set) error {
		if n < 1 {
			return fmt.Errorf("%w: %s(%d): not positive", delivery.ErrInvalidOption, optBatchSize, n)
		}
		s.Put(optBatchSize, n)
		return nil
	})
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
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, options.AckWait, optPollInterval,
		options.ResendInterval, optBatchSize, options.CloseTimeout, options.Logger)
	if err != nil {
		return c, err
	}
	if c.ackWait, err = options.AtLeast(s, delivery.ErrInvalidOption, who, options.AckWait, 30*time.Second, minAckWait); err != nil {
		return c, err
	}
	if c.resendInterval, err = options.AtLeast(s, delivery.ErrInvalidOption, who, options.ResendInterval, 100*time.Millisecond, time.Millisecond); err != nil {
		return c, err
	}
	c.pollInterval = options.Get(s, optPollInterval, time.Second)
	c.batchSize = options.Get(s, optBatchSize, batchSize)
	c.closeTimeout = options.Get(s, options.CloseTimeout, options.DefaultCloseTimeout)
	c.logger = options.Get(s, options.Logger, options.Warnings())
	return c, nil
}

// maxTopicLen keeps "watermill_offsets_" + topic within PostgreSQL's 63
// bytes: a longer name would be truncated, silently, and two long topics
// with the same first 45 bytes would share their tables.
const maxTopicLen = 63 - len("watermill_offsets_")

var topicRE = regexp.MustCompile(`^[A-Za-z0-9_.:$-]+$`)

// validTopic reports, as an error wrapping ErrInvalidTopic, whether topic
// cannot be used: it names the tables "watermill_<topic>" and
// "watermill_offsets_<topic>", so it must have 1 to 45 bytes of letters,
// digits, '_', '-', '.', ':' and '$' (watermill-sql's set).
func validTopic(topic string) error {
	if !topicRE.MatchString(topic) || len(topic) > maxTopicLen {
		return fmt.Errorf("%w %q: 1 to %d bytes of letters, digits, '_', '-', '.', ':' and '$'", ErrInvalidTopic, topic, maxTopicLen)
	}
	return nil
}
