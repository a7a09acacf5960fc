package options

// Retention is the name of WithRetention (time.Duration): how long what a
// constructor stores is kept before it may be deleted (the dead-letter
// archives' Prune).
const Retention = "WithRetention"
