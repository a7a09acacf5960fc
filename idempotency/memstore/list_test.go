package memstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/oplist/oplisttest"
)

func TestList(t *testing.T) {
	t.Parallel()
	s, err := memstore.New()
	require.NoError(t, err)
	oplisttest.Run(t, s, true)
}
