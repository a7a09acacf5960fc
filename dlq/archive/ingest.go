package archive

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

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/options"
)

// defaultRetryDelay is how long Ingest holds a message whose archive
// write failed before it nacks it, unless WithRetryDelay is given.
const defaultRetryDelay = time.Second

// nameRetryDelay is the name WithRetryDelay records.
const nameRetryDelay = "archive.WithRetryDelay"

// WithRetryDelay sets how long Ingest waits after an archive error before
// it nacks the message (default 1s), so a broker that
// redelivers at once (GoChannel, Redis Streams, Kafka) does not spin
// against an archive that is down. Zero nacks at once.
func WithRetryDelay(d time.Duration) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if d < 0 {
			return fmt.Errorf("%w: negative ingest retry delay %v", dlq.ErrInvalidOption, d)
		}
		s.Put(nameRetryDelay, d)
		return nil
	})
}

// ingester is the configuration of one Ingest call.
type ingester struct {
	log   *slog.Logger
	delay time.Duration
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
// It takes dlq.WithLogger (default: discard; every archive error is
// logged at Warn) and WithRetryDelay.
//
// Ingest returns nil when ctx ends or the subscriber closes the
// subscription, and an error when Subscribe fails or an option is invalid.
// It never closes sub or a.
func Ingest(ctx context.Context, sub message.Subscriber, topic string, a Archive, opts ...dlq.Option) error {
	if sub == nil || a == nil || topic == "" {
		return fmt.Errorf("%w: ingest needs a subscriber, a topic and an archive", dlq.ErrInvalidOption)
	}
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return err
	}
	if err := s.Check(dlq.ErrInvalidOption, "archive.Ingest", options.Logger, nameRetryDelay); err != nil {
		return err
	}
	c := ingester{
		log:   options.Get(s, options.Logger, slog.New(slog.DiscardHandler)),
		delay: options.Get(s, nameRetryDelay, defaultRetryDelay),
	}
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return fmt.Errorf("archive: ingest: subscribe to %q: %w", topic, err)
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
func (c *ingester) ingest(ctx context.Context, topic string, a Archive, msg *message.Message) {
	entry := copyMessage(msg)
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

// contentSpace is the UUIDv5 namespace of contentUUID: the namespace of
// dlq's derived UUID, with its own name prefix, so that entries archived
// before the archive package existed keep their IDs.
var contentSpace = uuid.MustParse("6f1b3c1e-52a4-4d52-9a63-1d9f2f0c8e77")

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
	return uuid.NewSHA1(contentSpace, append([]byte("surely-dlq-content:"), h.Sum(nil)...)).String()
}
