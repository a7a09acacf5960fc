package middleware

import (
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
)

// Names the tests of package middleware_test use for what package
// middleware does not export: the reserved keyless namespace, two
// defaults, the option that shortens the lease extension, and the
// traceparent formatter.

const (
	KeylessNamespace = idem.KeylessNamespace

	DefaultStoreTimeout        = defaults.StoreTimeout
	DefaultDeadLetterRetryWait = defaults.DeadLetterRetryWait
)

var (
	WithExtension = withExtension
	Traceparent   = traceparent
)
