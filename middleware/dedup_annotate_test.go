package middleware_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/retry"
)

// noRetention hides the store's RetentionReporter: Dedup knows no
// retention.
type noRetention struct{ idempotency.Store }

// Dedup used without Identity (it extracts the identity itself) names the
// operation in a final failure, for the dead letter (dlq/replay reads the
// record there): key, fingerprint, namespace and the store's retention,
// and the namespace also when the store reports no retention.
func TestDedupWithoutIdentityFinalNamesOperation(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New(idempotency.WithRetention(time.Hour))
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		store     idempotency.Store
		retention time.Duration
	}{{"retention reported", mem, time.Hour}, {"no retention", noRetention{leaseStore(t)}, 0}} {
		h := leaseDedup(t, c.store, func(*message.Message) ([]*message.Message, error) {
			return nil, retry.Permanent(errors.New("card declined"))
		})
		_, err := h(leaseMsg("u-1", "k-1", `{}`))
		fe, ok := dlq.AsFinal(err)
		require.True(t, ok, "%s: final: %v", c.name, err)
		require.Equal(t, dlq.ReasonPermanent, fe.Reason, c.name)
		require.Equal(t, "k-1", fe.OperationKey, c.name)
		require.NotEmpty(t, fe.Fingerprint, c.name)
		require.Equal(t, leaseNS, fe.Namespace, c.name)
		require.Equal(t, c.retention, fe.Retention, c.name)
	}
}
