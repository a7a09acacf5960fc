// Package faults has fault-injecting fakes for tests: a store that fails on
// demand and a publisher that fails a given number of times.
package faults

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
)

// ErrInjected is the error the fakes return when told to fail.
var ErrInjected = errors.New("faults: injected failure")

// Store wraps an idempotency.Store; while down, every call fails with ErrInjected.
type Store struct {
	idempotency.Store
	mu     sync.Mutex
	down   bool
	calls  map[string]int
	failed int
}

// NewStore wraps s.
func NewStore(s idempotency.Store) *Store { return &Store{Store: s, calls: map[string]int{}} }

// SetDown makes every call fail (true) or pass (false).
func (s *Store) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// Calls returns how many times method was called.
func (s *Store) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *Store) enter(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	if s.down {
		s.failed++
		return ErrInjected
	}
	return nil
}

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := s.enter("Claim"); err != nil {
		return idempotency.ClaimResult{}, err
	}
	return s.Store.Claim(ctx, req)
}

// Complete implements idempotency.Store.
func (s *Store) Complete(ctx context.Context, l idempotency.Lease, o idempotency.Outcome) error {
	if err := s.enter("Complete"); err != nil {
		return err
	}
	return s.Store.Complete(ctx, l, o)
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, l idempotency.Lease, f idempotency.Failure) error {
	if err := s.enter("Release"); err != nil {
		return err
	}
	return s.Store.Release(ctx, l, f)
}

// Extend implements idempotency.Store.
func (s *Store) Extend(ctx context.Context, l idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if err := s.enter("Extend"); err != nil {
		return l, err
	}
	return s.Store.Extend(ctx, l, d)
}

// Publisher records published messages; it fails the first FailFirst calls.
type Publisher struct {
	mu        sync.Mutex
	failFirst int
	calls     int
	published map[string][]*message.Message
}

// NewPublisher returns a publisher failing its first failFirst calls.
func NewPublisher(failFirst int) *Publisher {
	return &Publisher{failFirst: failFirst, published: map[string][]*message.Message{}}
}

// Publish implements message.Publisher.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.calls <= p.failFirst {
		return ErrInjected
	}
	p.published[topic] = append(p.published[topic], msgs...)
	return nil
}

// Close implements message.Publisher.
func (p *Publisher) Close() error { return nil }

// Published returns the messages published to topic.
func (p *Publisher) Published(topic string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.published[topic]...)
}

// Retention forwards the wrapped store's retention (0 when it reports none).
func (s *Store) Retention() time.Duration {
	if rr, ok := s.Store.(idempotency.RetentionReporter); ok {
		return rr.Retention()
	}
	return 0
}
