package sqlstore_test

import (
	"testing"

	"github.com/surely-dev/surely/internal/oplist/oplisttest"
)

// The listing of surely ops ls, on every dialect.
func TestList(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b backend) {
		oplisttest.Run(t, newStore(t, b.open(t), b.dialect), true)
	})
}
