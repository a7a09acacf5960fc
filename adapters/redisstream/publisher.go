package redisstream

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/delivery"
)

// Publisher is watermill-redisstream's publisher with a Redis client of its
// own. Publish returns after Redis accepted every entry (XADD). It never
// trims a stream: a trimmed entry is gone even while a consumer group has
// not consumed it, or holds it pending (watermill-redisstream then acks
// it, unread). Trim streams yourself, below the oldest entry every group
// has acked (XTRIM MINID).
type Publisher struct {
	inner *wmredis.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher with a Redis client of its own, made
// from redisOpts; Close closes it. It takes WithMarshaler and
// delivery.WithLogger; any other option is an error wrapping
// delivery.ErrInvalidOption.
func NewPublisher(redisOpts *redis.UniversalOptions, opts ...delivery.Option) (*Publisher, error) {
	if redisOpts == nil {
		return nil, fmt.Errorf("%w: nil Redis options", delivery.ErrInvalidOption)
	}
	cfg, err := newPublisherConfig(opts)
	if err != nil {
		return nil, err
	}
	client := redis.NewUniversalClient(redisOpts)
	inner, err := wmredis.NewPublisher(wmredis.PublisherConfig{Client: client, Marshaller: cfg.marshaler}, watermill.NewSlogLogger(cfg.logger))
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redisstream: publisher: %w", err)
	}
	return &Publisher{inner: inner}, nil
}

// Publish appends msgs to the stream topic, one XADD each, in order. It
// stops at the first failure: the entries before it are stored, that one
// and the rest are not. The XADD runs with each message's context.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.inner.Publish(topic, msgs...)
}

// Close closes the publisher and its Redis client.
func (p *Publisher) Close() error { return p.inner.Close() }
