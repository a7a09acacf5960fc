package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/surely-dev/surely/delivery"
)

// Publisher is a Watermill publisher on NATS JetStream. Publish returns only
// after JetStream acknowledged every message (PubAck: stored, and
// replicated as the stream says). It owns its connection.
type Publisher struct {
	inner *wmnats.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to the NATS server at url (nats.Connect, with
// WithNATSOptions' options) and returns a publisher that owns the
// connection: Close closes it. It takes WithMarshaler, WithNATSOptions and
// delivery.WithLogger; any other option is an error wrapping
// delivery.ErrInvalidOption.
//
// Each message is published with its UUID as the Nats-Msg-Id header, so
// that JetStream drops a second publish of the same message within the
// stream's duplicate window (2 minutes by default): the re-emission of a
// handler's output after a crash, or a retried Publish, is stored once.
// The publisher never creates streams (create them with EnsureStream): a
// topic without a stream fails to publish instead of being created with
// unknown retention.
func NewPublisher(url string, opts ...delivery.Option) (*Publisher, error) {
	if url == "" {
		return nil, fmt.Errorf("%w: empty url", delivery.ErrInvalidOption)
	}
	cfg, err := newPublisherConfig(opts)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, cfg.natsOptions...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	inner, err := wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
		Marshaler:         cfg.marshaler,
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream:         wmnats.JetStreamConfig{TrackMsgID: true},
	}, watermill.NewSlogLogger(cfg.logger))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: publisher: %w", err)
	}
	return &Publisher{inner: inner}, nil
}

// Publish publishes msgs to the subject topic, one after the other, each
// waiting for its PubAck. It stops at the first failure: the messages
// before it are stored, that one and the rest are not (publishing all of
// them again is safe within the duplicate window).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.inner.Publish(topic, msgs...)
}

// Close closes the connection.
func (p *Publisher) Close() error { return p.inner.Close() }

// EnsureStream creates the stream of cfg when it does not exist, and checks
// that an existing one captures every subject of cfg. It never changes an
// existing stream (its limits may be an operator's): to change one, update
// it deliberately with jetstream's UpdateStream. It does not close nc.
//
// The zero values of jetstream.StreamConfig are the safe ones for
// at-least-once delivery: file storage, limits retention (messages stay
// after they are acked, so a dead letter can be replayed from them), and
// a 2-minute duplicate window for the publisher's Nats-Msg-Id.
func EnsureStream(ctx context.Context, nc *nats.Conn, cfg jetstream.StreamConfig) error {
	if nc == nil {
		return fmt.Errorf("%w: nil connection", delivery.ErrInvalidOption)
	}
	if cfg.Name == "" || len(cfg.Subjects) == 0 {
		return fmt.Errorf("%w: a stream needs a name and subjects", delivery.ErrInvalidOption)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: jetstream: %w", err)
	}
	_, err = js.CreateStream(ctx, cfg)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("nats: create stream %q: %w", cfg.Name, err)
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		return fmt.Errorf("nats: stream %q: %w", cfg.Name, err)
	}
	have := s.CachedInfo().Config.Subjects
	for _, subj := range cfg.Subjects {
		if !slices.Contains(have, subj) {
			return fmt.Errorf("nats: stream %q exists with subjects %v, without %q; EnsureStream does not change it",
				cfg.Name, have, subj)
		}
	}
	return nil
}
