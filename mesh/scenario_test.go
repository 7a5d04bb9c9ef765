package mesh

import (
	"fmt"
	"testing"
)

// TestSimSteady: with no faults every step's ring holds every node, for
// 3 to 16 nodes, with and without a lossy network.
func TestSimSteady(t *testing.T) {
	for _, size := range []int{3, 8, 16} {
		for _, lossy := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/lossy=%v", size, lossy), func(t *testing.T) {
				s := newSimNet(t, uint64(size))
				if lossy {
					s.drop, s.dup, s.minDelay, s.maxDelay = 0.2, 0.1, 1, 6
				}
				s.addN(size, nil)
				s.runUntil(2000, "5 steps done", func() bool { return s.minStep() >= 5 })
				s.checkNoStepLost()
				full := 0
				for _, d := range s.done {
					if len(d.ring.Members) == size {
						full++
					}
				}
				// Under loss a heartbeat gap may exclude a node once; most
				// rings must still be full.
				if want := len(s.done) - 1; !lossy && full != len(s.done) || lossy && full < want/2 {
					t.Fatalf("%d of %d rings had all %d members", full, len(s.done), size)
				}
			})
		}
	}
}
