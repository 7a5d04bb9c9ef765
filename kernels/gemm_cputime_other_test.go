//go:build !linux

package kernels

import "time"

// threadCPUTime is unavailable here; benchmarks then report wall time only.
func threadCPUTime() time.Duration { return 0 }

// processCPUTime is unavailable here; benchmarks then report wall time only.
func processCPUTime() time.Duration { return 0 }
