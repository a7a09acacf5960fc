package sqlarchive

// Tables returns the names of a's tables, for the tests to drop them.
func Tables(a *Archive) []string { return a.tables() }
