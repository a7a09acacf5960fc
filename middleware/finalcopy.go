package middleware

import "github.com/surely-dev/surely/dlq"

// finalCopy is err (a chain holding a *dlq.FinalError) whose FinalError,
// as errors.As and dlq.AsFinal find it, is fe: a copy with the fields the
// chain filled in (attempts, history, operation). The handler's own
// FinalError is never written: it may be a package-level value that other
// messages return at the same time. errors.Is still finds it, through err.
type finalCopy struct {
	fe  *dlq.FinalError
	err error
}

func (e *finalCopy) Error() string { return e.err.Error() }

func (e *finalCopy) Unwrap() error { return e.err }

// As answers a *dlq.FinalError target with the copy.
func (e *finalCopy) As(target any) bool {
	if p, ok := target.(**dlq.FinalError); ok {
		*p = e.fe
		return true
	}
	return false
}

// editFinal returns err with its FinalError fe replaced by a copy that set
// changed (see finalCopy).
func editFinal(err error, fe *dlq.FinalError, set func(*dlq.FinalError)) error {
	cp := *fe
	set(&cp)
	return &finalCopy{fe: &cp, err: err}
}
