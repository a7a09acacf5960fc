package memstore_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// One option type configures the Extractor and every store: memstore.New
// refuses the options it does not use instead of ignoring them, and a nil
// option.
func TestNewRefusesOptionsItDoesNotTake(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]idempotency.Option{
		"WithLogger":     idempotency.WithLogger(slog.Default()),
		"WithSources":    idempotency.WithSources(idempotency.FromUUID()),
		"WithPrefix":     redisstore.WithPrefix("x:"),
		"WithInTxClaims": sqlstore.WithInTxClaims(),
	} {
		_, err := memstore.New(opt)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
		require.ErrorContains(t, err, "memstore.New does not take option "+name)
	}
	_, err := memstore.New(nil)
	require.ErrorIs(t, err, idempotency.ErrInvalidOption, "nil option")
}
