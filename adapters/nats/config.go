package nats

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"
)

// ErrInvalidOption wraps every configuration error of the constructors.
var ErrInvalidOption = errors.New("nats: invalid option")

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("nats: subscriber closed")

// ErrNoStream is returned by Subscribe when no stream captures the topic.
var ErrNoStream = errors.New("nats: no stream captures the topic")

// Defaults of Config.
const (
	DefaultAckWait     = 30 * time.Second
	DefaultConcurrency = 1
	// MinAckWait is the shortest AckWait accepted.
	MinAckWait = 100 * time.Millisecond
)

// Config configures a Subscriber.
type Config struct {
	// Consumer names this consumer group (required): letters, digits, '-'
	// and '_'. Each topic gets its own durable JetStream consumer, named by
	// ConsumerName(Consumer, topic); every process using the same Consumer
	// shares its messages (competing consumers).
	Consumer string
	// AckWait is how long the server waits for an ack before it redelivers
	// (default 30s). surely's dedup step extends it (InProgress) while the
	// handler runs, so it needs to exceed only the gap between two
	// extensions (the dedup lease/3), not the longest handler.
	AckWait time.Duration
	// Concurrency is how many messages of one topic are in flight at once
	// (default 1). It is also the consumer's MaxAckPending, so the server
	// never hands out messages that wait in the client while their ack
	// timers run.
	Concurrency int
	// Marshaler converts between Watermill messages and NATS messages
	// (default: watermill-nats' NATSMarshaler, metadata as headers). Use the
	// same one as the publisher. Its Unmarshal gets a *nats.Msg with the
	// subject, reply subject, headers and data of the delivery; it is not
	// bound to a subscription, so it cannot ack (surely does).
	Marshaler wmnats.MarshalerUnmarshaler
	// NatsOptions are passed to nats.Connect (name, credentials, TLS,
	// reconnect policy).
	NatsOptions []nats.Option
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if !validName(out.Consumer) {
		return out, fmt.Errorf("%w: Consumer %q must be non-empty, at most %d characters, of letters, digits, '-' and '_'",
			ErrInvalidOption, out.Consumer, maxConsumerLen)
	}
	switch {
	case out.AckWait == 0:
		out.AckWait = DefaultAckWait
	case out.AckWait < MinAckWait:
		return out, fmt.Errorf("%w: AckWait %v is shorter than %v", ErrInvalidOption, out.AckWait, MinAckWait)
	}
	switch {
	case out.Concurrency == 0:
		out.Concurrency = DefaultConcurrency
	case out.Concurrency < 0:
		return out, fmt.Errorf("%w: Concurrency %d is negative", ErrInvalidOption, out.Concurrency)
	}
	if out.Marshaler == nil {
		out.Marshaler = &wmnats.NATSMarshaler{}
	}
	return out, nil
}

const maxConsumerLen = 64

func validName(s string) bool {
	if s == "" || len(s) > maxConsumerLen {
		return false
	}
	for _, r := range s {
		if !nameRune(r) {
			return false
		}
	}
	return true
}

func nameRune(r rune) bool {
	return r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

// ConsumerName returns the name of the durable JetStream consumer that a
// Subscriber with Config.Consumer consumer creates for topic:
// "<consumer>-<topic>", with every character of topic other than letters,
// digits, '-' and '_' replaced by '_' and then, when anything was replaced
// or the topic is long, an FNV-32a hash of the topic appended so that two
// topics never share a consumer.
func ConsumerName(consumer, topic string) string {
	clean := strings.Map(func(r rune) rune {
		if nameRune(r) {
			return r
		}
		return '_'
	}, topic)
	if clean != topic || len(clean) > 96 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(topic))
		clean = fmt.Sprintf("%s-%08x", clean[:min(len(clean), 96)], h.Sum32())
	}
	return consumer + "-" + clean
}
