package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// DefaultIngestRetryDelay is how long Ingest holds a message whose archive
// write failed before it nacks it, unless WithIngestRetryDelay is given.
const DefaultIngestRetryDelay = time.Second

// IngestOption configures Ingest.
type IngestOption func(*ingestConfig) error

type ingestConfig struct {
	log   *slog.Logger
	delay time.Duration
}

// WithIngestLogger sets the logger of Ingest (default: discard). It logs
// every archive error at Warn.
func WithIngestLogger(l *slog.Logger) IngestOption {
	return func(c *ingestConfig) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		c.log = l
		return nil
	}
}

// WithIngestRetryDelay sets how long Ingest waits after an archive error
// before it nacks the message (default DefaultIngestRetryDelay), so a
// broker that redelivers at once (GoChannel, Redis Streams, Kafka) does not
// spin against an archive that is down. Zero nacks at once.
func WithIngestRetryDelay(d time.Duration) IngestOption {
	return func(c *ingestConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative ingest retry delay %v", ErrInvalidOption, d)
		}
		c.delay = d
		return nil
	}
}

// Ingest moves the messages of a broker's dead-letter topic into an
// archive: it subscribes to topic on sub and puts every message into a,
// one at a time. It acks a message only after the archive stored it; when
// the archive fails it waits the retry delay and nacks, so the broker keeps
// the message and delivers it again: nothing is lost. Storing is
// idempotent by UUID, so a redelivered message counts as a copy.
//
// A message without a UUID (some brokers' raw messages) is archived under
// a UUID derived from its payload and metadata, so each redelivery of it
// finds the same entry. A message that is not an envelope is archived as
// it is, with an empty reason.
//
// Ingest returns nil when ctx ends or the subscriber closes the
// subscription, and an error when Subscribe fails or an option is invalid.
// It never closes sub or a.
func Ingest(ctx context.Context, sub message.Subscriber, topic string, a Archive, opts ...IngestOption) error {
	if sub == nil || a == nil || topic == "" {
		return fmt.Errorf("%w: ingest needs a subscriber, a topic and an archive", ErrInvalidOption)
	}
	c := ingestConfig{log: slog.New(slog.DiscardHandler), delay: DefaultIngestRetryDelay}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return err
		}
	}
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return fmt.Errorf("dlq: ingest: subscribe to %q: %w", topic, err)
	}
	for {
		var msg *message.Message
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case msg, ok = <-msgs:
			if !ok {
				return nil
			}
		}
		c.ingest(ctx, topic, a, msg)
	}
}

// ingest archives one message and acks it, or nacks it after the delay.
func (c *ingestConfig) ingest(ctx context.Context, topic string, a Archive, msg *message.Message) {
	entry := CopyMessage(msg)
	if entry.UUID == "" {
		entry.UUID = contentUUID(msg)
	}
	entry.SetContext(ctx)
	err := a.Publish(topic, entry)
	if err == nil {
		msg.Ack()
		return
	}
	c.log.WarnContext(ctx, "dead-letter ingest: archive failed, the message will be redelivered",
		"topic", topic, "uuid", entry.UUID, "error", err)
	if c.delay > 0 {
		t := time.NewTimer(c.delay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	msg.Nack()
}

// contentUUID derives a UUID from a message's payload and metadata.
func contentUUID(msg *message.Message) string {
	h := sha256.New()
	field := func(s []byte) {
		_, _ = h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		_, _ = h.Write(s)
	}
	field(msg.Payload)
	for _, k := range slices.Sorted(maps.Keys(msg.Metadata)) {
		field([]byte(k))
		field([]byte(msg.Metadata[k]))
	}
	return uuid.NewSHA1(uuidSpace, append([]byte("surely-dlq-content:"), h.Sum(nil)...)).String()
}
