// Package membroker is a surely adapter written outside surely's module: a
// tiny in-memory broker with consumer groups, acks, nacks with a delay,
// an ack deadline that a consumer can extend, and a delivery count, and the
// Watermill publisher and subscriber over it. It imports only surely's
// public packages (delivery, dlq), and its test runs surely's conformance
// suite, adapters/adaptertest, against it.
//
// The broker keeps everything in the process's memory: a message not acked
// when its consumer's process dies is gone with it (the suite's crash test
// is skipped: Features.NoCrashRecovery). It is an example, not a broker to
// run in production.
//
// # The broker
//
// A topic keeps every message published to it, as bytes. Each consumer
// group of a topic reads all of them, from the first (the group is created
// by its first subscription), and its subscribers compete for them: a
// message goes to one subscriber of the group at a time. A delivery stays
// with its subscriber until it is acked (gone for the group), nacked
// (ready again at once, or after the delay that delivery.Control.NackAfter
// asked for), or its ack deadline, AckWait after the delivery or its last
// delivery.Control.Extend, passes: the group then hands it to the next
// subscriber that asks, and the late ack or nack of the first delivery is
// ignored. delivery.Info.Count counts the deliveries of a message to its
// group.
//
// Messages travel encoded (JSON of UUID, metadata and payload), so one can
// arrive undecodable (PublishRaw): the subscriber hands it out marked with
// delivery.KeyDecodeError and its raw bytes as the payload, for surely's chain
// to dead-letter.
package membroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
)

// pollInterval is how often a waiting subscription looks again for a
// message whose delay or ack deadline has passed (a publish, a nack or an
// ack wakes it at once).
const pollInterval = 10 * time.Millisecond

// ErrClosed is returned by the publisher and subscriber after Close.
var ErrClosed = errors.New("membroker: closed")

// Broker is the in-memory broker. Its methods are safe for concurrent use.
type Broker struct {
	ackWait      time.Duration
	closeTimeout time.Duration

	mu      sync.Mutex
	topics  map[string]*topic
	changed chan struct{} // closed and replaced on every change
}

type topic struct {
	log    [][]byte
	groups map[string]*group
}

// group is one consumer group's view of a topic.
type group struct {
	next    int      // the topic's next message not yet taken into pending
	pending []*entry // not acked yet, in order
}

type entry struct {
	raw        []byte
	deliveries int
	gen        int       // the current delivery; acks of another are stale
	inFlight   bool      // handed to a subscriber and not settled
	readyAt    time.Time // when not in flight: no delivery before
	deadline   time.Time // when in flight: another delivery after
}

// New returns a broker whose deliveries go back to their group ackWait
// after the delivery (or its last extension) unless acked or nacked, and
// whose subscribers' Close waits up to closeTimeout for the messages in
// flight to be acked or nacked. Either defaults to 30s when not positive.
func New(ackWait, closeTimeout time.Duration) *Broker {
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	if closeTimeout <= 0 {
		closeTimeout = 30 * time.Second
	}
	return &Broker{ackWait: ackWait, closeTimeout: closeTimeout, topics: map[string]*topic{}, changed: make(chan struct{})}
}

// notify wakes the waiting subscriptions. Called with b.mu held.
func (b *Broker) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *Broker) topic(name string) *topic {
	t, ok := b.topics[name]
	if !ok {
		t = &topic{groups: map[string]*group{}}
		b.topics[name] = t
	}
	return t
}

// PublishRaw appends raw, as it is, to topic: a message that need not
// decode.
func (b *Broker) PublishRaw(topicName string, raw []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topic(topicName)
	t.log = append(t.log, append([]byte(nil), raw...))
	b.notify()
}

// take hands out the group's first message that is ready, or whose ack
// deadline passed, as a new delivery. ok is false when there is none;
// changed is closed on the broker's next change.
func (b *Broker) take(topicName, groupName string, now time.Time) (e *entry, gen, count int, ok bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topic(topicName)
	g, exists := t.groups[groupName]
	if !exists {
		g = &group{}
		t.groups[groupName] = g
	}
	for ; g.next < len(t.log); g.next++ {
		g.pending = append(g.pending, &entry{raw: t.log[g.next]})
	}
	for _, e := range g.pending {
		if (!e.inFlight && !now.Before(e.readyAt)) || (e.inFlight && !now.Before(e.deadline)) {
			e.inFlight = true
			e.deliveries++
			e.gen++
			e.deadline = now.Add(b.ackWait)
			return e, e.gen, e.deliveries, true, b.changed
		}
	}
	return nil, 0, 0, false, b.changed
}

// settle acks (delay < 0) or nacks delivery gen of e, unless it is stale.
func (b *Broker) settle(topicName, groupName string, e *entry, gen int, ack bool, delay time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.gen != gen || !e.inFlight {
		return // another delivery took over after the deadline
	}
	e.inFlight = false
	if ack {
		g := b.topics[topicName].groups[groupName]
		for i, p := range g.pending {
			if p == e {
				g.pending = append(g.pending[:i], g.pending[i+1:]...)
				break
			}
		}
	} else {
		e.readyAt = time.Now().Add(delay)
	}
	b.notify()
}

// extend pushes back the ack deadline of delivery gen of e.
func (b *Broker) extend(e *entry, gen int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.gen != gen || !e.inFlight {
		return errors.New("membroker: the delivery's ack deadline passed; it went to another consumer")
	}
	e.deadline = time.Now().Add(b.ackWait)
	return nil
}

// wire is a message's encoding on the broker.
type wire struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata"`
	Payload  []byte            `json:"payload"`
}

// Publisher publishes to a Broker.
type Publisher struct {
	b      *Broker
	mu     sync.Mutex
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher to b.
func NewPublisher(b *Broker) *Publisher { return &Publisher{b: b} }

// Publish appends msgs to topic, in order.
func (p *Publisher) Publish(topicName string, msgs ...*message.Message) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return ErrClosed
	}
	for _, msg := range msgs {
		raw, err := json.Marshal(wire{UUID: msg.UUID, Metadata: msg.Metadata, Payload: msg.Payload})
		if err != nil {
			return fmt.Errorf("membroker: encode %s: %w", msg.UUID, err)
		}
		p.b.PublishRaw(topicName, raw)
	}
	return nil
}

// Close makes the publisher refuse further publishes.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// Subscriber is a consumer in one consumer group of a Broker.
type Subscriber struct {
	b     *Broker
	group string

	closing   chan struct{} // stop handing out messages
	abandon   chan struct{} // stop waiting for acks
	closeOnce sync.Once

	mu     sync.Mutex // orders wg.Add in Subscribe before wg.Wait in Close
	closed bool
	wg     sync.WaitGroup // subscriptions
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber in consumer group group of b.
func NewSubscriber(b *Broker, group string) *Subscriber {
	return &Subscriber{b: b, group: group, closing: make(chan struct{}), abandon: make(chan struct{})}
}

// Subscribe hands out the group's messages of topic, one at a time: the
// next after the previous one was acked or nacked. The channel is closed
// when ctx is done or the subscriber closes.
func (s *Subscriber) Subscribe(ctx context.Context, topicName string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go s.run(ctx, topicName, out)
	return out, nil
}

// run is one subscription. Only run sends on out and closes it.
func (s *Subscriber) run(ctx context.Context, topicName string, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	for {
		e, gen, count, ok, changed := s.b.take(topicName, s.group, time.Now())
		if !ok {
			select {
			case <-changed:
			case <-poll.C:
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
			continue
		}
		if !s.deliver(ctx, topicName, e, gen, count, out) {
			return
		}
	}
}

// deliver hands out delivery gen of e and waits until it is settled. It
// returns false when the subscription ends.
func (s *Subscriber) deliver(ctx context.Context, topicName string, e *entry, gen, count int, out chan<- *message.Message) bool {
	msg := decode(e.raw)
	c := &control{b: s.b, e: e, gen: gen}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mctx = delivery.WithInfo(mctx, delivery.Info{Count: count, Redelivered: count > 1})
	msg.SetContext(delivery.WithControl(mctx, c))
	select {
	case out <- msg:
	case <-ctx.Done():
		s.b.settle(topicName, s.group, e, gen, false, 0) // not handed out
		return false
	case <-s.closing:
		s.b.settle(topicName, s.group, e, gen, false, 0)
		return false
	}
	select {
	case <-msg.Acked():
		s.b.settle(topicName, s.group, e, gen, true, 0)
	case <-msg.Nacked():
		s.b.settle(topicName, s.group, e, gen, false, c.nackDelay())
	case <-s.abandon:
		// Left in flight: it goes back to the group at its ack deadline.
		return false
	}
	select {
	case <-s.closing:
		return false
	default:
		return true
	}
}

// decode turns raw into a message, or into one marked with
// delivery.KeyDecodeError, the raw bytes as its payload.
func decode(raw []byte) *message.Message {
	var w wire
	if err := json.Unmarshal(raw, &w); err != nil || w.UUID == "" {
		if err == nil {
			err = errors.New("no UUID")
		}
		msg := message.NewMessage(watermill.NewUUID(), raw)
		msg.Metadata.Set(delivery.KeyDecodeError, "membroker: decode: "+err.Error())
		return msg
	}
	msg := message.NewMessage(w.UUID, w.Payload)
	for k, v := range w.Metadata {
		msg.Metadata.Set(k, v)
	}
	return msg
}

// Close stops handing out messages, waits (up to the broker's close
// timeout) for those in flight to be acked or nacked, and then cancels the
// contexts of the rest and leaves them to go back to their group at their
// ack deadline. Close is safe to call more than once
// (the router calls it too).
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		t := time.NewTimer(s.b.closeTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
		close(s.abandon)
		<-done
	})
	return nil
}

// control is the delivery.Control of one delivery.
type control struct {
	b   *Broker
	e   *entry
	gen int

	mu    sync.Mutex
	delay time.Duration
}

// NackAfter makes the nack that follows hold the message back for d.
func (c *control) NackAfter(d time.Duration) bool {
	c.mu.Lock()
	c.delay = d
	c.mu.Unlock()
	return true
}

func (c *control) nackDelay() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.delay
}

// Extend pushes the delivery's ack deadline back to AckWait from now.
func (c *control) Extend(context.Context) error { return c.b.extend(c.e, c.gen) }
