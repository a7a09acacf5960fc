package middleware_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
)

// faultStore wraps a store and injects faults on demand.
type faultStore struct {
	idempotency.Store
	// lostCompletes is how many applied Completes lose their reply.
	lostCompletes atomic.Int32
	completes     atomic.Int32
	releases      atomic.Int32
	// extend replaces the inner Extend when set.
	extend func(ctx context.Context, l idempotency.Lease, d time.Duration) (idempotency.Lease, error)
	// onCall, when set, sees the context of every call.
	onCall func(method string, ctx context.Context)
}

func (s *faultStore) seen(method string, ctx context.Context) {
	if s.onCall != nil {
		s.onCall(method, ctx)
	}
}

func (s *faultStore) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	s.seen("Claim", ctx)
	return s.Store.Claim(ctx, req)
}

func (s *faultStore) Complete(ctx context.Context, l idempotency.Lease, o idempotency.Outcome) error {
	s.seen("Complete", ctx)
	s.completes.Add(1)
	if err := s.Store.Complete(ctx, l, o); err != nil {
		return err
	}
	if s.lostCompletes.Add(-1) >= 0 {
		return errors.New("read tcp 127.0.0.1:6379: connection reset by peer")
	}
	return nil
}

func (s *faultStore) Release(ctx context.Context, l idempotency.Lease, f idempotency.Failure) error {
	s.seen("Release", ctx)
	s.releases.Add(1)
	return s.Store.Release(ctx, l, f)
}

func (s *faultStore) Extend(ctx context.Context, l idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	s.seen("Extend", ctx)
	if s.extend != nil {
		return s.extend(ctx, l, d)
	}
	return s.Store.Extend(ctx, l, d)
}

func (s *faultStore) Get(ctx context.Context, ns, key string) (idempotency.Record, error) {
	s.seen("Get", ctx)
	return s.Store.Get(ctx, ns, key)
}

// leaseChain is Observe (recording the outcome) around Dedup around h.
type leaseChain struct {
	h        message.HandlerFunc
	mu       sync.Mutex
	outcomes []delivery.Outcome
}

func newLeaseChain(t *testing.T, store idempotency.Store, ns string, h message.HandlerFunc, opts ...middleware.Option) *leaseChain {
	t.Helper()
	c := &leaseChain{}
	obs, err := middleware.Observe(middleware.WithOnOutcome(func(_ context.Context, p delivery.OutcomeParams) delivery.OutcomeResult {
		c.mu.Lock()
		c.outcomes = append(c.outcomes, p.Outcome)
		c.mu.Unlock()
		return delivery.OutcomeResult{}
	}))
	require.NoError(t, err)
	dedup, err := middleware.Dedup(store, ns, opts...)
	require.NoError(t, err)
	c.h = obs(dedup(h))
	return c
}

func (c *leaseChain) deliver(key string) ([]*message.Message, error) {
	msg := message.NewMessage("uuid-"+key, []byte(`{"n":1}`))
	msg.Metadata.Set(idempotency.DefaultMetadataKey, key)
	return c.h(msg)
}

func (c *leaseChain) lastOutcome() delivery.Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.outcomes) == 0 {
		return ""
	}
	return c.outcomes[len(c.outcomes)-1]
}

func produceOne(*message.Message) ([]*message.Message, error) {
	return []*message.Message{message.NewMessage("produced-1", []byte("out"))}, nil
}
