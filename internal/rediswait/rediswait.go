// Package rediswait is the WAIT option shared by the Redis idempotency
// store and the Redis dead-letter archive: its bounds, and the connection
// WAIT must be sent on.
package rediswait

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicas is the value of a WithWaitReplicas option: wait until N
// replicas acknowledged the writes, for at most Timeout.
type Replicas struct {
	N       int
	Timeout time.Duration
}

// New checks n and timeout: at least one replica, and a timeout of at
// least 1ms (WAIT 0 blocks forever: a write must never hang). The error
// is plain; the caller wraps its family's ErrInvalidOption.
func New(n int, timeout time.Duration) (Replicas, error) {
	if n < 1 {
		return Replicas{}, fmt.Errorf("WAIT needs at least 1 replica, got %d", n)
	}
	if timeout < time.Millisecond {
		return Replicas{}, fmt.Errorf("WAIT timeout must be at least 1ms, got %v", timeout)
	}
	return Replicas{N: n, Timeout: timeout}, nil
}

// Supported returns an error unless c can give the connection WAIT is
// sent on: a *redis.Client (single node, Sentinel) or a
// *redis.ClusterClient.
func Supported(c redis.UniversalClient) error {
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	}
	return fmt.Errorf("WAIT needs a *redis.Client or *redis.ClusterClient, got %T", c)
}

// PrimaryConn returns a connection to the primary of key's slot: WAIT
// counts the replicas that acknowledged its own connection's writes. The
// caller closes it.
func PrimaryConn(ctx context.Context, c redis.UniversalClient, key string) (*redis.Conn, error) {
	switch cc := c.(type) {
	case *redis.Client:
		return cc.Conn(), nil
	case *redis.ClusterClient:
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return n.Conn(), nil
	}
	return nil, Supported(c)
}
