package mesh

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSimRandomFaults drives random networks through random crashes,
// restarts, joins, graceful leaves, partitions and heals on a lossy,
// reordering, duplicating network. Throughout: rings completed for one model
// never overlap, and without partitions at most one ring completes a step.
// At the end, faults stop: all live nodes must converge on one model and go
// on completing steps together, with no step skipped.
func TestSimRandomFaults(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { simRandomRun(t, seed) })
	}
}

func simRandomRun(t *testing.T, seed uint64) {
	s := newSimNet(t, 1000+seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	size := 3 + rng.IntN(8)
	s.drop, s.dup = rng.Float64()*0.2, rng.Float64()*0.1
	s.minDelay, s.maxDelay = 1, 1+rng.IntN(5)
	s.addN(size, nil)
	next := size
	for range 12 {
		s.run(10 + rng.IntN(60))
		simRandomEvent(s, rng, &next)
	}
	s.heal()
	for _, id := range s.ids {
		if n := s.nodes[id]; !n.up && rng.IntN(2) == 0 {
			s.restart(id)
		}
	}
	s.runUntil(3000, "converged", s.converged)
	rings := map[PeerID]int{}
	for _, id := range s.ids {
		rings[id] = s.nodes[id].rings
	}
	s.runUntil(3000, "every live node in 2 more rings", func() bool {
		for _, id := range s.ids {
			if n := s.nodes[id]; n.up && n.rings < rings[id]+2 {
				return false
			}
		}
		return true
	})
	s.checkNoStepLost()
}

func simRandomEvent(s *simNet, rng *rand.Rand, next *int) {
	var up []PeerID
	for _, id := range s.ids {
		if s.nodes[id].up {
			up = append(up, id)
		}
	}
	pick := up[rng.IntN(len(up))]
	switch rng.IntN(6) {
	case 0:
		if len(up) > 1 {
			s.crash(pick)
		}
	case 1:
		for _, id := range s.ids {
			if !s.nodes[id].up && s.nodes[id].m.Status().State != StateLeft {
				s.restart(id)
				break
			}
		}
	case 2:
		s.add(simID(*next), 0, "", nil)
		*next++
	case 3:
		if len(up) > 1 {
			s.leave(pick)
		}
	case 4:
		rng.Shuffle(len(up), func(i, j int) { up[i], up[j] = up[j], up[i] })
		cut := 1 + rng.IntN(max(1, len(up)-1))
		s.partition(up[:cut], up[cut:])
	case 5:
		s.heal()
	}
}
