package amqp

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/surely-dev/surely/delivery"
)

// deliveryLimit is the x-delivery-limit of the queues surely declares:
// effectively none. RabbitMQ 4 gives quorum queues a default limit of 20
// deliveries (per its 4.0 release notes), after which a message is dropped
// (or dead-lettered by the broker); RabbitMQ 3 reads -1 as a limit below one and dropped a message at
// its first nack (measured on 3.10.8). A large explicit value means
// "unlimited" on both, so surely's durable attempt budget and dead letter
// decide when a message stops being retried, never the broker.
const deliveryLimit = math.MaxInt32

// QueueArguments returns the arguments surely declares every queue with:
// a quorum queue (x-queue-type quorum: replicated, and it counts deliveries
// in the x-delivery-count header) with an x-delivery-limit of 2^31-1: in
// effect none, so that surely's attempt budget decides, never the broker. Queues are durable,
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
		"x-delivery-limit": int64(deliveryLimit),
	}
}

// link is the connection a Publisher or a Subscriber owns: dialed at
// construction, dialed again on the next use after it was lost, closed by
// Close (which sets closed).
type link struct {
	url       string
	config    *amqp.Config // WithAMQPConfig's, or nil
	name      string       // the connection name, without WithAMQPConfig
	errClosed error        // returned once closed

	dialMu sync.Mutex // one dial at a time
	mu     sync.Mutex // guards conn and closed
	conn   *amqp.Connection
	closed bool
}

// dial sets the link up and dials its first connection (the constructors'
// last step: a server that cannot be reached fails them).
func (l *link) dial(url string, config *amqp.Config, name string, errClosed error) error {
	if url == "" {
		return fmt.Errorf("%w: empty url", delivery.ErrInvalidOption)
	}
	l.url, l.config, l.name, l.errClosed = url, config, name, errClosed
	_, err := l.connection()
	return err
}

// connection returns the live connection, dialing a new one when there is
// none or it was lost.
func (l *link) connection() (*amqp.Connection, error) {
	l.dialMu.Lock()
	defer l.dialMu.Unlock()
	l.mu.Lock()
	c, closed := l.conn, l.closed
	l.mu.Unlock()
	if closed {
		return nil, l.errClosed
	}
	if c != nil && !c.IsClosed() {
		return c, nil
	}
	c, err := amqp.DialConfig(l.url, dialConfig(l.config, l.name))
	if err != nil {
		return nil, fmt.Errorf("amqp: connect: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, l.errClosed
	}
	l.conn = c
	return c, nil
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

// defaultMarshaler returns watermill-amqp's DefaultMarshaler (metadata as
// string headers, the UUID in the _watermill_message_uuid header, persistent
// delivery mode) with textHeaders as its PreprocessDelivery, so that headers
// set by other publishers as numbers or booleans decode as text instead of
// failing.
func defaultMarshaler() wmamqp.DefaultMarshaler {
	return wmamqp.DefaultMarshaler{PreprocessDelivery: textHeaders}
}

// textHeaders returns d with its integer, floating-point and boolean header
// values replaced by their text ("5", "1.5", "true"), for Watermill's
// string-only metadata. Other values (tables, arrays, timestamps, decimals,
// byte arrays, void) are left as they are: watermill-amqp's DefaultMarshaler
// then fails on them, and the Subscriber hands the message out marked
// undecodable. d's header table is not modified; the result has a copy.
func textHeaders(d amqp.Delivery) amqp.Delivery {
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
