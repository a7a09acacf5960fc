package sql

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// ErrInvalidOption wraps every configuration error of the constructors.
var ErrInvalidOption = errors.New("sql: invalid option")

// ErrInvalidTopic is returned for a topic that cannot name a table (see
// ValidTopic).
var ErrInvalidTopic = errors.New("sql: invalid topic")

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("sql: subscriber closed")

// ErrDeliveryExpired is returned by the delivery.Control's Extend when the
// delivery's AckDeadline has already passed (or it was settled): the
// message has gone back to the consumer group.
var ErrDeliveryExpired = errors.New("sql: delivery expired")

// Defaults of Config.
const (
	DefaultAckDeadline    = 30 * time.Second
	DefaultPollInterval   = time.Second
	DefaultResendInterval = 100 * time.Millisecond
	DefaultBatchSize      = 1
	DefaultCloseTimeout   = 30 * time.Second
	// MinAckDeadline is the shortest AckDeadline accepted.
	MinAckDeadline = 100 * time.Millisecond
)

// retryInterval is how long a subscription waits after a failed query (the
// database is down) before it queries again; watermill-sql logs each
// failure. A serialization failure between two consumers of a group is
// retried at once.
const retryInterval = time.Second

// Config configures a Subscriber.
type Config struct {
	// ConsumerGroup names the consumer group (required): its row in the
	// topic's offsets table holds how far the group got. Every subscriber
	// with the same group shares the topic's messages, one at a time (see
	// the package doc).
	ConsumerGroup string
	// AckDeadline is how long a message handed out may stay unacked
	// before its delivery is given up: the consuming transaction is rolled
	// back, the handler's context cancelled, and the message goes back to
	// the group (default 30s). surely's dedup step pushes it back while
	// the handler runs (delivery.Control.Extend), so it need not exceed
	// the longest handler, only the gap between two extensions.
	AckDeadline time.Duration
	// PollInterval is how long an idle subscription waits before it looks
	// for new rows again (default 1s): the latency of a message published
	// to an idle topic.
	PollInterval time.Duration
	// ResendInterval is how long watermill-sql waits before it hands a
	// nacked message out again (default 100ms). surely's chain already
	// waited (its backoff) before it nacked.
	ResendInterval time.Duration
	// BatchSize is how many rows one consuming transaction reads (default
	// 1). Above 1, the acks of a batch commit together at its end: a crash,
	// or a deadline that passes, delivers the batch's acked messages again,
	// and the transaction stays open for the whole batch.
	BatchSize int
	// CloseTimeout bounds how long Close (or the end of Subscribe's
	// context) waits for the message in flight to be acked or nacked
	// (default 30s).
	CloseTimeout time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.ConsumerGroup == "" || len(out.ConsumerGroup) > 255 {
		return out, fmt.Errorf("%w: ConsumerGroup must have 1 to 255 bytes", ErrInvalidOption)
	}
	type dur struct {
		name string
		v    *time.Duration
		def  time.Duration
		min  time.Duration
	}
	for _, d := range []dur{
		{"AckDeadline", &out.AckDeadline, DefaultAckDeadline, MinAckDeadline},
		{"PollInterval", &out.PollInterval, DefaultPollInterval, time.Millisecond},
		{"ResendInterval", &out.ResendInterval, DefaultResendInterval, time.Millisecond},
		{"CloseTimeout", &out.CloseTimeout, DefaultCloseTimeout, 0},
	} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < d.min || *d.v < 0:
			return out, fmt.Errorf("%w: %s %v is shorter than %v", ErrInvalidOption, d.name, *d.v, d.min)
		}
	}
	switch {
	case out.BatchSize == 0:
		out.BatchSize = DefaultBatchSize
	case out.BatchSize < 0:
		return out, fmt.Errorf("%w: BatchSize %d is negative", ErrInvalidOption, out.BatchSize)
	}
	return out, nil
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
