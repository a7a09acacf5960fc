//go:build race

package main

// raceEnabled: this test binary, and so its consumer processes, run with
// the race detector.
const raceEnabled = true
