//go:build unix

package bench

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user and system) this process has used so
// far: cpu_ns/msg is its growth from the router's start to the last
// processed message, per message. It covers every goroutine of the
// process (the embedded NATS server's too, the same in every variant), not
// the external servers (RabbitMQ, Redis). CPU time, unlike the time per
// message, hardly depends on how loaded a shared machine is.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
