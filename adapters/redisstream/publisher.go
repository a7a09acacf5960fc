package redisstream

import (
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// PublisherConfig configures a Publisher. The zero value is ready to use.
type PublisherConfig struct {
	// Marshaler converts Watermill messages to stream entries (default:
	// watermill-redisstream's DefaultMarshallerUnmarshaller: UUID, payload
	// and msgpack metadata fields). Use the counterpart of the
	// subscribers' Unmarshaler.
	Marshaler wmredis.Marshaller
}

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
// from opts; Close closes it. logger may be nil (discard).
func NewPublisher(opts *redis.UniversalOptions, cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if opts == nil {
		return nil, fmt.Errorf("%w: nil Redis options", ErrInvalidOption)
	}
	if cfg.Marshaler == nil {
		cfg.Marshaler = wmredis.DefaultMarshallerUnmarshaller{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	client := redis.NewUniversalClient(opts)
	inner, err := wmredis.NewPublisher(wmredis.PublisherConfig{Client: client, Marshaller: cfg.Marshaler}, watermill.NewSlogLogger(logger))
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
