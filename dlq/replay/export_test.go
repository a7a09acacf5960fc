package replay

// WithSleep is withSleep, for the tests of package replay_test.
var WithSleep = withSleep

// NewKeyFor is newKeyFor, for the tests of package replay_test.
var NewKeyFor = newKeyFor
