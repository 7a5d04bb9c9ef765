package kernels

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPUTime returns the CPU time the calling OS thread has used. Under
// contention (other builds on the same two cores) it counts only the time
// this thread ran, unlike wall time. Callers lock the goroutine to its thread.
func threadCPUTime() time.Duration { return cpuClock(3) } // CLOCK_THREAD_CPUTIME_ID

// processCPUTime returns the CPU time all threads of this process have used.
func processCPUTime() time.Duration { return cpuClock(2) } // CLOCK_PROCESS_CPUTIME_ID

func cpuClock(id uintptr) time.Duration {
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
