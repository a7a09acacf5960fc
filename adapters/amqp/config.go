package amqp

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrInvalidOption wraps every configuration error of the constructors.
var ErrInvalidOption = errors.New("amqp: invalid option")

// ErrClosed is returned by Subscribe and SubscribeInitialize after the
// Subscriber's Close, and by Publish after the Publisher's.
var ErrClosed = errors.New("amqp: subscriber or publisher closed")

// Defaults.
const (
	// DefaultConcurrency is Config.Concurrency's default.
	DefaultConcurrency = 1
	// DefaultChannels is PublisherConfig.Channels' default.
	DefaultChannels = 8
	// MaxConcurrency is the largest Config.Concurrency: AMQP's prefetch
	// count is a 16-bit number.
	MaxConcurrency = math.MaxUint16
	// MaxChannels is the largest PublisherConfig.Channels (RabbitMQ's
	// default channel_max is 2047 per connection).
	MaxChannels = 1024
)

// DeliveryLimit is the x-delivery-limit of the queues surely declares:
// effectively none. RabbitMQ 4 gives quorum queues a default limit of 20
// deliveries (per its 4.0 release notes), after which a message is dropped
// (or dead-lettered by the broker); RabbitMQ 3 reads -1 as a limit below one and dropped a message at
// its first nack (measured on 3.10.8). A large explicit value means
// "unlimited" on both, so surely's durable attempt budget and dead letter
// decide when a message stops being retried, never the broker.
const DeliveryLimit = math.MaxInt32

// QueueArguments returns the arguments surely declares every queue with:
// a quorum queue (x-queue-type quorum: replicated, and it counts deliveries
// in the x-delivery-count header) with DeliveryLimit. Queues are durable,
// neither exclusive nor auto-deleted. Create a queue with exactly these
// arguments when you declare it yourself: the Subscriber declares the
// queue with them, and RabbitMQ refuses a declaration whose arguments
// differ from the existing queue's (ErrQueueMismatch), also when the
// existing queue has one more (such as x-max-length; measured on RabbitMQ
// 3.10.8). The Publisher declares a missing queue with them and uses an
// existing one as it is.
func QueueArguments() amqp.Table {
	return amqp.Table{
		"x-queue-type":     amqp.QueueTypeQuorum,
		"x-delivery-limit": int64(DeliveryLimit),
	}
}

// Config configures a Subscriber. The zero value is ready to use.
type Config struct {
	// Concurrency is how many messages of one topic are in flight at once
	// (default 1). It is also the consumer's prefetch (basic.qos), so the
	// broker never hands this process more messages than it works on: the
	// others stay in the queue for other consumers.
	Concurrency int
	// Marshaler converts AMQP deliveries to Watermill messages (default:
	// DefaultMarshaler()). Use one compatible with the publisher's. It gets
	// a copy of the delivery without the x-delivery-count header (that is
	// in delivery.Info) and without an Acknowledger: surely acks.
	Marshaler wmamqp.Marshaler
	// AMQPConfig is passed to amqp.DialConfig (TLS, heartbeat, vhost,
	// connection name). Default: a 10s heartbeat and the connection name
	// "surely subscriber".
	AMQPConfig *amqp.Config
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	switch {
	case out.Concurrency == 0:
		out.Concurrency = DefaultConcurrency
	case out.Concurrency < 0 || out.Concurrency > MaxConcurrency:
		return out, fmt.Errorf("%w: Concurrency %d is not in 1..%d", ErrInvalidOption, out.Concurrency, MaxConcurrency)
	}
	if out.Marshaler == nil {
		out.Marshaler = DefaultMarshaler()
	}
	return out, nil
}

// PublisherConfig configures a Publisher. The zero value is ready to use.
type PublisherConfig struct {
	// Channels is the size of the publisher's channel pool (default 8):
	// how many Publish calls run at once; more wait for a free channel.
	// Every channel is in confirm mode, and a Publish holds its channel
	// until the broker confirmed, so with one channel publishing is
	// sequential (about 1k messages/s measured with confirms).
	Channels int
	// Marshaler converts Watermill messages to AMQP publishings (default:
	// DefaultMarshaler(): metadata as string headers, the UUID in the
	// _watermill_message_uuid header, persistent delivery mode). A
	// watermill-amqp DefaultMarshaler with NotPersistentDeliveryMode is
	// refused: a transient message is lost when the broker restarts.
	Marshaler wmamqp.Marshaler
	// AMQPConfig is passed to amqp.DialConfig. Default: a 10s heartbeat
	// and the connection name "surely publisher".
	AMQPConfig *amqp.Config
}

func (c *PublisherConfig) withDefaults() (PublisherConfig, error) {
	out := *c
	switch {
	case out.Channels == 0:
		out.Channels = DefaultChannels
	case out.Channels < 0 || out.Channels > MaxChannels:
		return out, fmt.Errorf("%w: Channels %d is not in 1..%d", ErrInvalidOption, out.Channels, MaxChannels)
	}
	switch m := out.Marshaler.(type) {
	case nil:
		out.Marshaler = DefaultMarshaler()
	case wmamqp.DefaultMarshaler:
		if m.NotPersistentDeliveryMode {
			return out, fmt.Errorf("%w: a marshaler with NotPersistentDeliveryMode publishes messages a broker restart loses", ErrInvalidOption)
		}
	case *wmamqp.DefaultMarshaler:
		if m == nil || m.NotPersistentDeliveryMode {
			return out, fmt.Errorf("%w: a nil marshaler, or one with NotPersistentDeliveryMode, cannot publish durably", ErrInvalidOption)
		}
	}
	return out, nil
}

// dialConfig returns the amqp.Config to dial with: a copy of the caller's
// (with its own Properties table: amqp091-go writes to it while dialing, so
// one shared by a publisher and a subscriber would be a data race), or the
// defaults with the connection name name.
func dialConfig(c *amqp.Config, name string) amqp.Config {
	if c != nil {
		out := *c
		out.Properties = maps.Clone(c.Properties)
		return out
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	return amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Properties: props}
}

// validQueueName checks a topic, which is the queue's name: 1-255 bytes,
// not in the reserved "amq." namespace.
func validQueueName(topic string) error {
	switch {
	case topic == "" || len(topic) > 255:
		return fmt.Errorf("amqp: topic %q: a queue name has 1 to 255 bytes", topic)
	case strings.HasPrefix(topic, "amq."):
		return fmt.Errorf("amqp: topic %q: queue names starting with \"amq.\" are reserved by the broker", topic)
	}
	return nil
}

// DefaultMarshaler returns watermill-amqp's DefaultMarshaler (metadata as
// string headers, the UUID in the _watermill_message_uuid header, persistent
// delivery mode) with TextHeaders as its PreprocessDelivery, so that headers
// set by other publishers as numbers or booleans decode as text instead of
// failing.
func DefaultMarshaler() wmamqp.DefaultMarshaler {
	return wmamqp.DefaultMarshaler{PreprocessDelivery: TextHeaders}
}

// TextHeaders returns d with its integer, floating-point and boolean header
// values replaced by their text ("5", "1.5", "true"), for Watermill's
// string-only metadata. Other values (tables, arrays, timestamps, decimals,
// byte arrays, void) are left as they are: watermill-amqp's DefaultMarshaler
// then fails on them, and the Subscriber hands the message out marked
// undecodable. d's header table is not modified; the result has a copy.
func TextHeaders(d amqp.Delivery) amqp.Delivery {
	if len(d.Headers) == 0 {
		return d
	}
	h := make(amqp.Table, len(d.Headers))
	for k, v := range d.Headers {
		if s, ok := scalarText(v); ok {
			h[k] = s
		} else {
			h[k] = v
		}
	}
	d.Headers = h
	return d
}

// scalarText returns the text of a number or boolean header value.
func scalarText(v any) (string, bool) {
	if n, ok := intValue(v); ok {
		return strconv.FormatInt(n, 10), true
	}
	switch v := v.(type) {
	case uint64:
		return strconv.FormatUint(v, 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case bool:
		return strconv.FormatBool(v), true
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true
	}
	return "", false
}

// intValue returns an integer header value (the types amqp091-go decodes
// AMQP integers to) as an int64.
func intValue(v any) (int64, bool) {
	switch v := v.(type) {
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}
