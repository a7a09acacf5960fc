package amqp

import (
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// DropConnection closes the subscriber's current connection, as a network
// failure would: the broker requeues what it held unacked, and the
// subscriber reconnects.
func DropConnection(s *Subscriber) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// DropPublisherConnection closes the publisher's current connection, as a
// network failure would.
func DropPublisherConnection(p *Publisher) {
	p.mu.Lock()
	c := p.conn
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// AfterSend makes p run f on the publishing channel after each message is
// sent and before its confirmation is read (set it before any Publish).
func AfterSend(p *Publisher, f func(*amqp.Channel)) { p.afterSend = f }

// Unexported values the tests compare with.
const (
	DeliveryLimit       = deliveryLimit
	DeliveryCountHeader = deliveryCountHeader
)

// DefaultMarshaler is the Subscriber's and Publisher's default marshaler.
func DefaultMarshaler() wmamqp.DefaultMarshaler { return defaultMarshaler() }
