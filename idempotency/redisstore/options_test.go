package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// One option type configures the Extractor and every store: redisstore.New
// refuses the options it does not use instead of ignoring them (WithClock
// too: its times come from the server's clock), and a nil option. Checked
// before the server is asked: no server needed.
func TestNewRefusesOptionsItDoesNotTake(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	for name, opt := range map[string]idempotency.Option{
		"WithClock":               idempotency.WithClock(time.Now),
		"WithFingerprintMetadata": idempotency.WithFingerprintMetadata("amount"),
		"WithTable":               sqlstore.WithTable("inbox"),
		"WithInTxClaims":          sqlstore.WithInTxClaims(),
	} {
		_, err := redisstore.New(t.Context(), c, redisstore.WithPrefix("x:"), opt)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
		require.ErrorContains(t, err, "redisstore.New does not take option "+name)
	}
	_, err := redisstore.New(t.Context(), c, nil)
	require.ErrorIs(t, err, idempotency.ErrInvalidOption, "nil option")
}
