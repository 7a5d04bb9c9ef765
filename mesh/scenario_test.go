package mesh

import (
	"fmt"
	"slices"
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

// waitState ticks until node id is in state st.
func (s *simNet) waitState(id PeerID, st State, limit int) {
	s.t.Helper()
	s.runUntil(limit, fmt.Sprintf("%s %v", id, st), func() bool { return s.nodes[id].m.Status().State == st })
}

// TestSimCrashMidAgreement: a node that crashes after voting is declared
// dead and the others decide the same step without it.
func TestSimCrashMidAgreement(t *testing.T) {
	s := newSimNet(t, 11)
	s.addN(5, nil)
	s.waitState("n03", StateAgreeing, 200)
	s.crash("n03")
	s.runUntil(400, "step 3 reached", func() bool { return s.minStep() >= 3 })
	s.checkNoStepLost()
	for _, d := range s.done {
		if d.ring.Rank("n03") >= 0 {
			t.Fatalf("step %d ring %v holds the crashed node", d.step, d.ring.Members)
		}
	}
}

// TestSimCrashMidReduce: a node crashing during the all-reduce is reported;
// the survivors agree a new ring for the same step.
func TestSimCrashMidReduce(t *testing.T) {
	s := newSimNet(t, 12)
	s.reduceTicks = 20
	s.addN(4, nil)
	s.waitState("n02", StateReducing, 200)
	s.crash("n02")
	s.runUntil(400, "step 2 reached", func() bool { return s.minStep() >= 2 })
	s.checkNoStepLost()
	d := s.done[0]
	if d.step != 0 || len(d.ring.Members) != 3 || d.ring.Round == 0 {
		t.Fatalf("step 0 completed by ring %v round %d, want the 3 survivors in a later round", d.ring.Members, d.ring.Round)
	}
	if st := s.nodes["n00"].m.Status(); st.Failures == 0 {
		t.Fatal("no failure was reported")
	}
}

// TestSimPartitionHeal: both sides of a partition go on; after the heal the
// smaller side adopts the larger side's model and all train together again.
func TestSimPartitionHeal(t *testing.T) {
	s := newSimNet(t, 13)
	s.addN(8, nil)
	s.runUntil(300, "step 2", func() bool { return s.minStep() >= 2 })
	big := []PeerID{"n00", "n01", "n02", "n03", "n04"}
	small := []PeerID{"n05", "n06", "n07"}
	s.partition(big, small)
	at := s.minStep()
	s.runUntil(600, "both sides progress", func() bool { return s.minStep() >= at+3 })
	s.heal()
	s.runUntil(600, "converged", s.converged)
	for _, id := range small {
		if s.nodes[id].m.Status().Adoptions == 0 {
			t.Errorf("%s (small side) did not adopt", id)
		}
	}
	for _, id := range big {
		if s.nodes[id].m.Status().Adoptions != 0 {
			t.Errorf("%s (big side) adopted", id)
		}
	}
	end := s.minStep()
	s.runUntil(400, "2 more steps together", func() bool { return s.minStep() >= end+2 })
	if last := s.done[len(s.done)-1]; len(last.ring.Members) != 8 {
		t.Fatalf("after the heal the ring is %v", last.ring.Members)
	}
}

// TestSimJoinAndLeave: a node with no model joins a running network, fetches
// the model and enters a ring; a leaver is dropped at once, with no failure.
func TestSimJoinAndLeave(t *testing.T) {
	s := newSimNet(t, 14)
	s.addN(4, nil)
	s.runUntil(300, "step 3", func() bool { return s.minStep() >= 3 })
	s.add("n09", 0, "", nil)
	s.runUntil(300, "joiner in a ring", func() bool { return s.nodes["n09"].rings > 0 })
	if st := s.nodes["n09"].m.Status(); st.Adoptions != 0 {
		t.Fatalf("joiner adopted instead of fetching: %+v", st)
	}
	before := len(s.done)
	s.waitState("n01", StateTraining, 100)
	s.leave("n01")
	s.run(2)
	for _, id := range []PeerID{"n00", "n02", "n03", "n09"} {
		if p := simPeer(s.nodes[id].m.Status(), "n01"); p == nil || !p.Dead {
			t.Fatalf("%s still counts the leaver alive: %+v", id, p)
		}
	}
	s.runUntil(300, "2 more steps", func() bool { return len(s.done) >= before+2 })
	for _, id := range []PeerID{"n00", "n02", "n03", "n09"} {
		if f := s.nodes[id].m.Status().Failures; f != 0 {
			t.Fatalf("%s reported %d failures after a graceful leave", id, f)
		}
	}
	if last := s.done[len(s.done)-1]; last.ring.Rank("n01") >= 0 || len(last.ring.Members) != 4 {
		t.Fatalf("ring after leave: %v", last.ring.Members)
	}
}

func simPeer(st Status, id PeerID) *PeerStatus {
	for i := range st.Peers {
		if st.Peers[i].ID == id {
			return &st.Peers[i]
		}
	}
	return nil
}

// TestSimMinMembers: nodes started 40 ticks apart do not run the first step
// before MinMembers of them are Ready; the first ring holds them all.
func TestSimMinMembers(t *testing.T) {
	s := newSimNet(t, 15)
	min4 := func(c *Config) { c.MinMembers = 4 }
	for i := range 4 {
		s.add(simID(i), 0, simGenesis, min4)
		s.run(40)
		if i < 3 && len(s.done) > 0 {
			t.Fatalf("a ring completed with only %d nodes started", i+1)
		}
	}
	s.runUntil(300, "step 1", func() bool { return s.minStep() >= 1 })
	if d := s.done[0]; len(d.ring.Members) != 4 {
		t.Fatalf("first ring %v, want all 4", d.ring.Members)
	}
}

// TestSimRestartBehind: a node restarted from an old checkpoint after the
// network moved on fetches the current model and trains with it again.
func TestSimRestartBehind(t *testing.T) {
	s := newSimNet(t, 16)
	s.addN(4, nil)
	s.runUntil(300, "step 2", func() bool { return s.minStep() >= 2 })
	s.waitState("n03", StateTraining, 100)
	s.crash("n03")
	s.runUntil(400, "others at step 5", func() bool { return s.minStep() >= 5 })
	s.restart("n03")
	s.runUntil(400, "converged", s.converged)
	before := s.nodes["n03"].rings
	s.runUntil(300, "restarted node in a ring", func() bool { return s.nodes["n03"].rings > before })
	s.checkNoStepLost()
}

// TestSimStraggler: a node far slower than StragglerTicks is left out of
// rings (and fetches the next model each time); the others never wait
// longer than the straggler timeout.
func TestSimStraggler(t *testing.T) {
	s := newSimNet(t, 17)
	s.addN(4, nil)
	s.nodes["n03"].trainSlow = 60
	s.runUntil(600, "step 5", func() bool { return s.nodes["n00"].m.Status().Step >= 5 })
	s.checkNoStepLost()
	for _, d := range s.done {
		if len(d.ring.Members) < 3 {
			t.Fatalf("step %d ring %v lost a fast node", d.step, d.ring.Members)
		}
	}
}

// TestSimPartitionSmallSideAhead: the small side trains faster and is
// several steps ahead when the partition heals; it still adopts the larger
// side's (older) model, and votes for the lower steps count again.
func TestSimPartitionSmallSideAhead(t *testing.T) {
	s := newSimNet(t, 18)
	s.addN(6, nil)
	s.runUntil(300, "step 2", func() bool { return s.minStep() >= 2 })
	big := []PeerID{"n00", "n01", "n02", "n03"}
	small := []PeerID{"n04", "n05"}
	for _, id := range big {
		s.nodes[id].trainSlow = 15
	}
	s.partition(big, small)
	s.runUntil(800, "small side 4 steps ahead", func() bool {
		sb, _ := s.nodes["n00"].m.Model()
		ss, _ := s.nodes["n04"].m.Model()
		return ss >= sb+4
	})
	s.heal()
	s.runUntil(600, "converged", s.converged)
	for _, id := range big {
		if s.nodes[id].m.Status().Adoptions != 0 {
			t.Errorf("%s (big side) adopted", id)
		}
	}
	before := len(s.done)
	s.runUntil(600, "2 more steps", func() bool { return len(s.done) >= before+2 })
	if last := s.done[len(s.done)-1]; len(last.ring.Members) != 6 || last.ring.Round != 0 {
		t.Fatalf("after the heal: ring %v round %d", last.ring.Members, last.ring.Round)
	}
}

// TestSimPartitionAloneBeyondKnownWindow: a member cut off alone trains on
// by itself (and faster) for more than KnownWindow steps: at the heal it
// knows none of the others, nor they it. The others weigh sides by known
// peers first and keep their line; the lone one has no known peer on its
// side, weighs by heads as before, and adopts the larger side although it
// is ahead: it only risks itself, and it must not stay a fork of one.
func TestSimPartitionAloneBeyondKnownWindow(t *testing.T) {
	s := newSimNet(t, 20)
	s.addN(5, nil)
	s.runUntil(300, "step 2", func() bool { return s.minStep() >= 2 })
	big := []PeerID{"n00", "n01", "n02", "n03"}
	const lone = "n04"
	for _, id := range big {
		s.nodes[id].trainSlow = 3
	}
	s.partition(big, []PeerID{lone})
	at := s.minStep()
	s.runUntil(20000, "both sides beyond KnownWindow", func() bool { return s.minStep() >= at+KnownWindow+2 })
	ls, _ := s.nodes[lone].m.Model()
	bs, _ := s.nodes["n00"].m.Model()
	if ls <= bs {
		t.Fatalf("lone node at step %d, big side at %d: want it ahead", ls, bs)
	}
	for _, id := range big {
		if s.nodes[lone].m.knows(id) || s.nodes[id].m.knows(lone) {
			t.Fatalf("%s and %s still know each other", lone, id)
		}
	}
	s.heal()
	s.runUntil(600, "converged", s.converged)
	if s.nodes[lone].m.Status().Adoptions == 0 {
		t.Errorf("%s (alone) did not adopt", lone)
	}
	for _, id := range big {
		if s.nodes[id].m.Status().Adoptions != 0 {
			t.Errorf("%s (big side) adopted", id)
		}
	}
	if st, _ := s.nodes["n00"].m.Model(); st < bs {
		t.Fatalf("the big side went back from step %d to %d", bs, st)
	}
	end := s.minStep()
	s.runUntil(600, "2 more steps together", func() bool { return s.minStep() >= end+2 })
	if last := s.done[len(s.done)-1]; len(last.ring.Members) != 5 {
		t.Fatalf("after the heal the ring is %v", last.ring.Members)
	}
	t.Logf("apart from step %d; at the heal lone at %d, big side at %d; together at %d", at, ls, bs, end)
}

// TestSimPartitionHealWithJoiners: 5 members split 3 | 2, and 2 joiners
// join the 2 while apart. At the heal each half knew the other's old
// members only: counted with its joiners, the 4 weighed themselves 4 known
// against the 3's 3, the 3 themselves 3 against the 4's 2, and neither
// adopted. Now the 3 see the 2 they know sign rings with the joiners,
// which vouches for them (Mesh.vouch), and the 4 see the same of the 3:
// both weigh 4 against 3, the 3 adopt, the 4 never do, and all 7 train
// together.
func TestSimPartitionHealWithJoiners(t *testing.T) {
	s := newSimNet(t, 23)
	s.addN(5, nil)
	s.runUntil(300, "step 2", func() bool { return s.minStep() >= 2 })
	a, b := []PeerID{"n00", "n01", "n02"}, []PeerID{"n03", "n04"}
	s.partition(a, b)
	at := s.minStep()
	for _, id := range []PeerID{"n05", "n06"} {
		s.group[id] = 2
		s.add(id, 0, "", nil)
	}
	s.runUntil(2000, "both sides 12 steps on", func() bool { return s.minStep() >= at+12 })
	s.heal()
	s.runUntil(1000, "converged", s.converged)
	for _, id := range append(slices.Clone(b), "n05", "n06") {
		if s.nodes[id].m.Status().Adoptions != 0 {
			t.Errorf("%s (the larger half) adopted", id)
		}
	}
	for _, id := range a {
		if s.nodes[id].m.Status().Adoptions == 0 {
			t.Errorf("%s (the smaller half) did not adopt", id)
		}
	}
	// The 3 are newcomers to the 4's line (admit.go): a few a step.
	s.runUntil(2000, "a ring of all 7", func() bool { return len(s.done[len(s.done)-1].ring.Members) == 7 })
	t.Logf("apart from step %d to %d; all 7 in the ring of step %d", at, at+12, s.done[len(s.done)-1].step)
}

// TestSimLastSurvivor: one node alone keeps completing steps after all its
// peers crashed at different points of a step.
func TestSimLastSurvivor(t *testing.T) {
	s := newSimNet(t, 19)
	s.addN(4, nil)
	s.waitState("n01", StateReady, 200)
	s.crash("n01")
	s.waitState("n02", StateAgreeing, 200)
	s.crash("n02")
	s.waitState("n03", StateReducing, 200)
	s.crash("n03")
	at := s.minStep()
	s.runUntil(600, "3 more steps alone", func() bool { return s.minStep() >= at+3 })
	s.checkNoStepLost()
	if last := s.done[len(s.done)-1]; len(last.ring.Members) != 1 {
		t.Fatalf("last ring %v", last.ring.Members)
	}
}

// TestSimLateJoinerWaitsForNextStep: a joiner whose Ready comes after the
// ring of its step was decided is not in that ring, does not disturb it,
// and enters the ring of a later step after fetching again.
func TestSimLateJoinerWaitsForNextStep(t *testing.T) {
	s := newSimNet(t, 20)
	s.reduceTicks = 12
	s.addN(3, nil)
	s.runUntil(300, "step 2", func() bool { return s.minStep() >= 2 })
	s.waitState("n00", StateReducing, 100) // the ring of this step is decided
	j := s.add("n09", 0, "", nil)
	j.trainSlow = 5
	s.waitState("n09", StateTraining, 100) // synced into the step being reduced
	syncedAt, _ := j.m.Model()
	if red, _ := s.nodes["n00"].m.Model(); red != syncedAt || s.nodes["n00"].m.State() != StateReducing {
		t.Fatalf("joiner synced step %d while n00 is at %d (%v): not the late case", syncedAt, red, s.nodes["n00"].m.State())
	}
	s.runUntil(400, "joiner in a ring", func() bool { return j.rings > 0 })
	for _, d := range s.done {
		if d.step == syncedAt && d.ring.Rank("n09") >= 0 {
			t.Fatalf("joiner in the ring of step %d, decided before it was Ready", d.step)
		}
	}
	for _, id := range []PeerID{"n00", "n01", "n02"} {
		if f := s.nodes[id].m.Status().Failures; f != 0 {
			t.Fatalf("%s reported %d failures", id, f)
		}
	}
	s.checkNoStepLost()
}

// TestSimQuickRestart: a node restarted (new incarnation) before its peers
// could notice it was gone sits the current step out — its old Ready and
// votes are dropped at once, so no ring includes the dead process and no
// all-reduce fails — and is back in a ring afterwards.
func TestSimQuickRestart(t *testing.T) {
	s := newSimNet(t, 21)
	s.addN(4, nil)
	s.runUntil(300, "step 1", func() bool { return s.minStep() >= 1 })
	s.nodes["n02"].trainSlow = 15 // the others wait for it, n03 among them
	s.waitState("n03", StateReady, 100)
	step, _ := s.nodes["n03"].m.Model()
	s.crash("n03")
	s.restart("n03")
	s.nodes["n02"].trainSlow = 0
	s.runUntil(300, "n03 back in a ring", func() bool {
		for _, d := range s.done {
			if d.step > step && d.ring.Rank("n03") >= 0 {
				return true
			}
		}
		return false
	})
	for _, d := range s.done {
		if d.step == step && d.ring.Rank("n03") >= 0 {
			t.Fatalf("step %d ring %v holds the restarted node", step, d.ring.Members)
		}
	}
	for _, id := range []PeerID{"n00", "n01", "n02"} {
		st := s.nodes[id].m.Status()
		if st.Failures != 0 {
			t.Errorf("%s reported %d failures", id, st.Failures)
		}
		if p := simPeer(st, "n03"); p == nil || p.Restarts != 1 || p.Incarnation != 2 {
			t.Errorf("%s's view of n03: %+v", id, p)
		}
	}
}

// TestSimDecidedVoteResentThinly: once a ring is decided, its members
// re-send their vote at the 1st, 2nd, 4th and 8th heartbeat and then every
// 8th, not at every heartbeat of a long all-reduce; a member that lost the
// others' votes still decides from a later re-send, and the ring completes.
func TestSimDecidedVoteResentThinly(t *testing.T) {
	s := newSimNet(t, 21)
	s.reduceTicks = 60 // 20 heartbeats of 3 ticks
	lost := true
	s.lose = func(from, to PeerID, msg *Message) bool {
		return lost && to == "n02" && msg.Type == MsgPropose
	}
	s.addN(3, nil)
	s.waitState("n00", StateReducing, 200)
	s.run(8) // the re-sends at the 1st and 2nd heartbeat are lost too
	if st := s.nodes["n02"].m.Status().State; st != StateAgreeing {
		t.Fatalf("n02 is %v, want agreeing: it has no vote of the others", st)
	}
	lost = false
	s.runUntil(200, "step 1", func() bool { return s.minStep() >= 1 })
	if d := s.done[0]; d.step != 0 || len(d.ring.Members) != 3 || d.ring.Round != 0 {
		t.Fatalf("step 0 completed by %v round %d, want all 3 in round 0", d.ring.Members, d.ring.Round)
	}

	s.sentMsgs = [msgTypeEnd]int{}
	s.runUntil(400, "step 3", func() bool { return s.minStep() >= 3 })
	// Per step and node: the vote, then re-sends at heartbeats 1, 2, 4, 8,
	// 16 of the 20; every heartbeat would be ≈ 21.
	if per := float64(s.sentMsgs[MsgPropose]) / (3 * 2); per > 8 {
		t.Fatalf("%.1f votes sent per node and step, want ≤ 8", per)
	}
}
