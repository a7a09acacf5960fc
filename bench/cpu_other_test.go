//go:build !unix

package bench

import (
	"testing"
	"time"
)

// processCPU is -1 where getrusage is not available: no cpu_ns/msg.
func processCPU(*testing.B) time.Duration { return -1 }
