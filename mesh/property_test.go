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
	seeds := 30
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			simRandomRun(t, seed)
		})
	}
}

// TestSimRandomFaultsLarge is make test's slice of the sweep at 4-64
// members (make test-sim runs 10 000 seeds): 8 seeds of 17 to 64, and the
// sweep's seeds that once failed. 666 and 700: a partition split the run's
// founders before the first ring (700: before its all-reduce), each half
// decided a first ring of its own, and the smaller half, knowing nobody on
// the larger side, never adopted its line (the founders are known now: cast).
// 4623 and 9053: members back at a step's model were disputants to the
// nodes that had heard their first vote and not to the others, and the two
// views re-voted against each other for 3000 rounds (noteVote).
func TestSimRandomFaultsLarge(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("tens of members: not under -short or -race")
	}
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			simRandomRunSized(t, 20000+seed, 17, 64, 0, nil)
		})
	}
	for _, seed := range []uint64{666, 700, 4623, 9053} {
		t.Run(fmt.Sprintf("found=%d", seed), func(t *testing.T) {
			t.Parallel()
			simRandomRunSized(t, seed, 4, 64, 0, nil)
		})
	}
}

// TestSimRandomFaultsFound: seeds beyond the suite's that once failed.
// 5109 and 5257: a member whose adoption failed came back to its own model
// and voted again in the round of its first vote, differently; its peers
// took it for an equivocator and excluded it from every later step.
// 6131: every holder of step 1 sat it out (two disputes, a restart); three
// restarted the step on their own, each forgiving only itself, and two of
// them decided rings of one on the others' old disputes.
// 7065: no protocol bug: every node holding a model went down, and a node
// restarted from its checkpoint of step 2 trained step 2 again with a
// joiner; the check took that redo for two rings of one step (amnesia).
// 7148 and 7469: the run's dice left no model up after the heal (the run
// now brings back what can come back).
// 9977: nodes restarted from old checkpoints followed the side their
// checkpoints' histories named (known peers) rather than the pair ahead,
// and outweighed it: a rollback of 14 steps. Not-established nodes weigh
// sides by heads (checkMember).
// 9144 and 9704: a member voted in a round of a step, moved on (adopted
// another line, or its ring completed) and later fetched that same model
// again; it voted again in the same round, differently, and its peers
// took it for an equivocator and excluded it from every later step (9144:
// in 26 rings of 167). A node keeps its last round per model (Mesh.voted).
// 8125: two groups that had made no model together met and trained apart
// to the end (each saw the other as strangers, like a fork of made-up
// identities); one node made rings with both in turn. Peers seen signing
// a ring with a known peer are known now (Mesh.vouch): the smaller group
// adopts the larger's line.
// 5091 (9-16 members): a member that crashed Ready was in some nodes' M
// and not in others'; their newcomer quotas (counted from M) differed, so
// did the newcomers they admitted, and they refuted each other's votes a
// round a tick to the end (the quota counts the history's members).
// 1259 (4-16 members) and 1693 (4-16, all-reduces of 30 ticks): a member
// Ready after its step's ring was decided without it voted anyway; it
// excluded the ring's members as disputants of an accusation that more
// than f of the step's n did not make (n counts members gone since), and
// completed the step alone, or with the others left over: two rings of
// one step in a connected network. A late member sits the step out
// (ringRunsWithout).
// 2814 (4-16, all-reduces of 30 ticks): every holder of step 7 sat it out
// after failed all-reduces, and two members restarted at once into it;
// each contested its accusers' votes, found them void and decided its
// contest's vote, a ring of one, without waiting for the other (votes
// that leave a node out no longer hurry it, and a contest's vote is
// decided only once the node could have voted).
// 17 (4-16, all-reduces of 30 ticks): the first ring of all ten was
// decided and its all-reduce cut by a partition; 3 and 7 trained apart
// from step 0, strangers to each other, and never merged (the members of
// a ring this node decided are known: Mesh.meet).
func TestSimRandomFaultsFound(t *testing.T) {
	for _, tc := range []struct {
		seed           uint64
		lo, hi, reduce int // members at the start; all-reduce ticks (0: 4)
	}{
		{5109, 3, 10, 0}, {5257, 3, 10, 0}, {6131, 3, 10, 0}, {7065, 3, 10, 0}, {7148, 3, 10, 0}, {7469, 3, 10, 0}, {9977, 3, 10, 0},
		{9144, 3, 10, 0}, {9704, 3, 10, 0}, {8125, 3, 10, 0},
		{5091, 9, 16, 0}, {1259, 4, 16, 0}, {1693, 4, 16, 30}, {2814, 4, 16, 30}, {17, 4, 16, 30},
	} {
		t.Run(fmt.Sprintf("seed=%d/members=%d-%d/reduce=%d", tc.seed, tc.lo, tc.hi, tc.reduce), func(t *testing.T) {
			t.Parallel()
			simRandomRunSized(t, tc.seed, tc.lo, tc.hi, tc.reduce, nil)
		})
	}
}

func simRandomRun(t *testing.T, seed uint64) { simRandomRunSized(t, seed, 3, 10, 0, nil) }

// simRandomRunSized is the random-fault run of seed with lo to hi members
// at the start (the suite's runs: 3 to 10).
func simRandomRunSized(t *testing.T, seed uint64, lo, hi, reduce int, trace func(string)) {
	s := newSimNet(t, 1000+seed)
	if reduce > 0 {
		s.reduceTicks = reduce
	}
	s.trace = trace
	rng := rand.New(rand.NewPCG(seed, 99))
	size := lo + rng.IntN(hi-lo+1)
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
	if !s.anyModel() {
		// The dice left no model up (seeds 7148, 7469): bring back every
		// node that can come back; if none holds a model, every holder
		// left and the run is over, with nothing to converge on.
		for _, id := range s.ids {
			if n := s.nodes[id]; !n.up && n.m.Status().State != StateLeft {
				s.restart(id)
			}
		}
		if !s.anyModel() {
			t.Logf("every node that held a model left: no run to converge")
			return
		}
	}
	healed := s.now
	s.runUntil(3000, "converged", s.converged)
	t.Logf("converged %d ticks after the heal; %d nodes; total %d ticks, %d packets queued", s.now-healed, len(s.ids), s.now, s.queued)
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
	for id, es := range s.equivocations { // nobody lies here
		t.Fatalf("%s reported honest peers as equivocators: %+v", id, es)
	}
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

// TestSimLossyCrashes: networks started with MinMembers = size, random
// crashes once the first ring completed, on a moderate network (10 % loss, ≤ 5 ticks delay: the failure
// detector is then nearly always right, so the strict one-ring-per-step
// check applies) and on a harsh one (40 % loss, delays beyond DeadTicks:
// live peers get declared dead, so only the no-overlap check applies).
// Every run must converge with no step lost.
func TestSimLossyCrashes(t *testing.T) {
	regimes := []struct {
		name       string
		drop       float64
		maxDelay   int
		wantStrict float64 // fraction of runs with no false death
	}{
		{"moderate", 0.1, 5, 0.9},
		{"harsh", 0.4, 20, 0},
	}
	seeds := 20
	if testing.Short() {
		seeds = 6
	}
	for _, rg := range regimes {
		t.Run(rg.name, func(t *testing.T) {
			strict := 0
			for seed := range uint64(seeds) {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					s := simCrashRun(t, seed, rg.drop, rg.maxDelay)
					if s.falseDead == 0 {
						strict++
					}
				})
			}
			if float64(strict) < rg.wantStrict*float64(seeds) {
				t.Fatalf("only %d of %d runs without false deaths: the strict check was barely exercised", strict, seeds)
			}
			t.Logf("%d of %d runs checked strictly", strict, seeds)
		})
	}
}

func simCrashRun(t *testing.T, seed uint64, drop float64, maxDelay int) *simNet {
	s := newSimNet(t, 5000+seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	s.drop, s.dup = drop, 0.15
	s.minDelay, s.maxDelay = 1, maxDelay
	size := 3 + rng.IntN(10)
	s.addN(size, func(c *Config) { c.MinMembers = size })
	// The crashes come after the first ring: before it, a crash leaves
	// fewer members than the minimum, and the run rightly waits.
	s.runUntil(3000, "the first ring", func() bool { return len(s.done) > 0 })
	for range 6 {
		s.run(20 + rng.IntN(50))
		var up []PeerID
		for _, id := range s.ids {
			if s.nodes[id].up {
				up = append(up, id)
			}
		}
		if rng.IntN(2) == 0 && len(up) > 1 {
			s.crash(up[rng.IntN(len(up))])
		}
	}
	s.runUntil(3000, "converged", s.converged)
	s.checkNoStepLost()
	return s
}
