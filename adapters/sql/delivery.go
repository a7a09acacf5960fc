package sql

import (
	"context"
	"sync"
	"time"

	"github.com/surely-dev/surely/delivery"
)

// lease is one delivery's ack wait, and its delivery.Control: Extend
// pushes the deadline back, NackAfter is not supported.
type lease struct {
	d       time.Duration
	expired chan struct{} // closed when the deadline passed unsettled

	mu    sync.Mutex
	timer *time.Timer
	over  bool // settled or expired
}

var _ delivery.Control = (*lease)(nil)

func newLease(d time.Duration) *lease {
	l := &lease{d: d, expired: make(chan struct{})}
	l.mu.Lock()
	l.timer = time.AfterFunc(d, l.expire)
	l.mu.Unlock()
	return l
}

func (l *lease) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.over {
		l.over = true
		close(l.expired)
	}
}

// settle ends the lease: the message was acked or nacked.
func (l *lease) settle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.over = true
	l.timer.Stop()
}

// NackAfter reports false: watermill-sql resends a nacked message after its
// fixed resend interval (delivery.WithResendInterval), to the same
// subscriber, inside the same transaction; surely's chain waits itself before it nacks.
func (l *lease) NackAfter(time.Duration) bool { return false }

// Extend moves the delivery's deadline to the ack wait (delivery.WithAckWait) from
// now. It fails with errDeliveryExpired once the deadline has passed or the
// message was settled.
func (l *lease) Extend(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over || !l.timer.Stop() {
		return errDeliveryExpired
	}
	l.timer.Reset(l.d)
	return nil
}
