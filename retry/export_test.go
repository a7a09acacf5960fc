package retry

// Names the tests of package retry_test use for what is not exported: the
// backoff, the error types behind Permanent and After, the cancellation
// check, and two constants.

type (
	Backoff        = backoff
	PermanentError = permanentError
	AfterError     = afterError
)

var IsCanceled = isCanceled

const (
	DefaultMultiplier = defaultMultiplier
	MinWait           = minWait
)

// Backoff returns the backoff the policy uses.
func (p *Policy) Backoff() Backoff { return p.backoff }
