//go:build !unix

package train

import "time"

// cpuTime is unavailable here; the CPU-time metrics are then omitted.
func cpuTime() time.Duration { return 0 }
