package redisstore_test

import (
	"testing"

	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/oplist/oplisttest"
)

// The listing of surely ops ls: SCAN under the test's own prefix.
func TestList(t *testing.T) {
	t.Parallel()
	client, prefix := setup(t)
	oplisttest.Run(t, newStore(t, client, redisstore.WithPrefix(prefix)), false)
}
