package redisstream

// Unexported values the tests compare with.
var (
	ErrNotPending = errNotPending
	ErrClaimed    = errClaimed
)

const (
	DecodeFieldsKey  = keyDecodeFields
	DecodeEntryIDKey = keyDecodeEntryID
)
