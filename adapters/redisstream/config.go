package redisstream

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
)

// ErrInvalidOption wraps every configuration error of the constructors.
var ErrInvalidOption = errors.New("redisstream: invalid option")

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("redisstream: subscriber closed")

// Errors of Extend (delivery.Control), wrapped.
var (
	// ErrNotPending: the entry is no longer in the group's pending entries
	// list (acked, or deleted from the stream).
	ErrNotPending = errors.New("redisstream: entry not pending")
	// ErrClaimed: another consumer of the group claimed the entry.
	ErrClaimed = errors.New("redisstream: entry claimed by another consumer")
)

// Defaults of Config.
const (
	DefaultMaxIdleTime     = 30 * time.Second
	DefaultNackResendSleep = 100 * time.Millisecond
	// MinMaxIdleTime is the shortest MaxIdleTime accepted.
	MinMaxIdleTime = 100 * time.Millisecond
	// HoldLimit is the longest NackAfter delay the subscriber holds a
	// message in process for, blocking its subscription; a longer one
	// leaves the entry pending for a later claim (see the package doc).
	HoldLimit = time.Second
)

// Config configures a Subscriber.
type Config struct {
	// Group is the consumer group (required). Every Subscriber with the
	// same Group shares the stream's entries (competing consumers); the
	// group is created at the start of the stream ("0") when missing, so a
	// group created after messages were published still gets them.
	Group string
	// Consumer names this consumer in the group (default: the host name
	// and a random suffix). Entries this consumer leaves pending are
	// claimed by others after MaxIdleTime, whatever its name.
	Consumer string
	// MaxIdleTime is how long an entry delivered to a consumer may go
	// without an ack or an extension before another consumer claims it
	// (default 30s). surely's dedup step extends it while the handler runs
	// (every lease/3), so it must exceed that interval, not the longest
	// handler; it is also how long a crashed consumer's entries wait.
	MaxIdleTime time.Duration
	// ClaimInterval is how often the subscriber looks for entries idle
	// longer than MaxIdleTime (default MaxIdleTime/4; at most MaxIdleTime).
	ClaimInterval time.Duration
	// NackResendSleep is the pause before a nacked message is handed out
	// again (default 100ms). watermill-redisstream resends nacked messages
	// in process, in a tight loop without it.
	NackResendSleep time.Duration
	// Unmarshaler decodes stream entries (default:
	// watermill-redisstream's DefaultMarshallerUnmarshaller). Use the
	// counterpart of the publisher's Marshaler. Its errors and panics mark
	// the message undecodable; they never end the subscription.
	Unmarshaler wmredis.Unmarshaller
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Group == "" {
		return out, fmt.Errorf("%w: Group is required", ErrInvalidOption)
	}
	if out.Consumer == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "consumer"
		}
		out.Consumer = host + "-" + watermill.NewShortUUID()
	}
	switch {
	case out.MaxIdleTime == 0:
		out.MaxIdleTime = DefaultMaxIdleTime
	case out.MaxIdleTime < MinMaxIdleTime:
		return out, fmt.Errorf("%w: MaxIdleTime %v is shorter than %v", ErrInvalidOption, out.MaxIdleTime, MinMaxIdleTime)
	}
	switch {
	case out.ClaimInterval == 0:
		out.ClaimInterval = out.MaxIdleTime / 4
	case out.ClaimInterval < 0 || out.ClaimInterval > out.MaxIdleTime:
		return out, fmt.Errorf("%w: ClaimInterval %v must be positive and at most MaxIdleTime %v",
			ErrInvalidOption, out.ClaimInterval, out.MaxIdleTime)
	}
	switch {
	case out.NackResendSleep == 0:
		out.NackResendSleep = DefaultNackResendSleep
	case out.NackResendSleep < 0:
		return out, fmt.Errorf("%w: NackResendSleep %v is negative", ErrInvalidOption, out.NackResendSleep)
	}
	if out.Unmarshaler == nil {
		out.Unmarshaler = wmredis.DefaultMarshallerUnmarshaller{}
	}
	return out, nil
}
