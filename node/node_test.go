package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTwoNodesRunAndStop runs two in-process nodes for two outer steps over
// the real host, mesh and all-reduce, blocking and overlapped: both end with
// the same model, and (checked by TestMain) every goroutine they started has
// ended.
func TestTwoNodesRunAndStop(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		t.Run(map[bool]string{false: "blocking", true: "overlap"}[overlap], func(t *testing.T) {
			twoNodesRunAndStop(t, overlap, AveragingMean)
		})
	}
	t.Run("robust", func(t *testing.T) { twoNodesRunAndStop(t, false, AveragingRobust) })
}

func twoNodesRunAndStop(t *testing.T, overlap bool, averaging string) {
	const steps = 2
	c := newCluster(t, "node-test")
	var nodes []*Node
	for range 2 {
		cfg := c.config(steps)
		cfg.Overlap, cfg.Averaging = overlap, averaging
		nodes = append(nodes, c.add(cfg))
	}
	c.runAll(nodes...)
	a, b := nodes[0], nodes[1]
	if a.model.Step() != steps || b.model.Step() != steps || a.model.Hash() != b.model.Hash() {
		t.Fatalf("a at step %d (%s), b at step %d (%s): want step %d, same hash", a.model.Step(), a.model.Hash(), b.model.Step(), b.model.Hash(), steps)
	}
	for _, n := range nodes {
		hist := n.board.historyList()
		if len(hist) != steps+1 { // [0]: the initial model
			t.Fatalf("%d history records, want %d", len(hist), steps+1)
		}
		for _, r := range hist[1:] {
			if r.Members != 2 || r.BytesSent == 0 || r.BytesReceived == 0 {
				t.Fatalf("step %d reduced over %d members, %d bytes sent, %d received: want both members over the network",
					r.Step, r.Members, r.BytesSent, r.BytesReceived)
			}
		}
	}
}

// TestRestartWhileBootstrapDown: a member restarted with its home while
// its only bootstrap peer is gone starts (resuming its checkpoint) instead
// of failing, and stops cleanly.
func TestRestartWhileBootstrapDown(t *testing.T) {
	c := newCluster(t, "node-test")
	a := c.add(c.config(1))
	cb := c.config(1)
	c.runAll(a, c.add(cb))
	cb.MaxOuterSteps = 0
	again := c.add(cb)
	ctx, stop := context.WithCancel(c.ctx)
	wait := c.start(ctx, nil, again)
	c.await("the restarted member's start", func() bool { return again.board.snapshot().PeerID != "" })
	stop()
	wait()
	if again.model.Step() != 1 {
		t.Fatalf("restarted at outer step %d, want its checkpoint's 1", again.model.Step())
	}
}

// TestSlowMemberCloses: three nodes, one 200× slower per inner step, under
// the default close rule: every step's ring holds all three, every member
// ends with the same model, and the slow member's phases end early (its
// compute per step well under H of its inner steps) instead of setting the
// others' pace.
func TestSlowMemberCloses(t *testing.T) {
	const steps, inner, slowStep = 3, 10, 200 * time.Millisecond
	c := newCluster(t, "node-slow")
	var nodes []*Node
	for i := range 3 {
		cfg := c.config(steps)
		cfg.InnerSteps, cfg.MinMembers = inner, 3
		if i == 2 {
			cfg.SimStep = slowStep
		}
		nodes = append(nodes, c.add(cfg))
	}
	c.runAll(nodes...)
	for _, n := range nodes {
		if n.model.Step() != steps || n.model.Hash() != nodes[0].model.Hash() {
			t.Fatalf("%s at step %d (%s), want step %d and %s", n.self, n.model.Step(), n.model.Hash(), steps, nodes[0].model.Hash())
		}
	}
	var compute float64
	for _, r := range nodes[2].board.historyList()[1:] {
		if r.Members != 3 {
			t.Fatalf("step %d reduced over %d members, want all 3", r.Step, r.Members)
		}
		compute += r.ComputeSec
	}
	whole := float64(steps*inner) * slowStep.Seconds()
	t.Logf("the slow member computed %.2f s over %d steps; whole phases take %.2f s", compute, steps, whole)
	if compute > 0.75*whole {
		t.Errorf("the slow member computed %.2f s over %d steps, whole phases take %.2f s", compute, steps, whole)
	}
}

// TestRestartPastInitialWaitsForTheLine: a member killed before its first
// checkpoint restarts with the run's initial model beside a fresh node,
// the two seeing nobody else. Its home says it was past step 0, so the two
// make no step from the initial model (a line of their own); once a member
// of the run's line is back they fetch its model and train on it with it.
func TestRestartPastInitialWaitsForTheLine(t *testing.T) {
	if testing.Short() {
		t.Skip("three restarts")
	}
	c := newCluster(t, "past-initial")
	ca := c.config(2)
	a := c.add(ca)
	cb := c.config(2)
	c.runAll(a, c.add(cb))
	if ok, err := hasPastInitial(cb.Home); !ok {
		t.Fatalf("no %s after two steps (%v)", PastInitialFile, err)
	}
	// Killed before its first checkpoint: the home keeps the manifest and
	// the record, not the model.
	if err := os.RemoveAll(filepath.Join(cb.Home, checkpointDir)); err != nil {
		t.Fatal(err)
	}
	cb.MaxOuterSteps = 4
	b := c.add(cb)
	ctx, stop := context.WithCancel(c.ctx)
	defer stop()
	waitB := c.start(ctx, nil, b)
	c.await("the restarted member's start", func() bool { return b.board.snapshot().PeerID != "" })
	cf := c.config(4)
	cf.Bootstrap = b.host.Addrs()
	f := c.add(cf)
	waitF := c.start(ctx, nil, f)
	c.await("the fresh node waiting for a second member", func() bool {
		s := f.board.snapshot()
		return s.Waiting != nil || s.OuterStep > 0
	})
	time.Sleep(time.Second) // a second of the two together: long enough for a step of 2 ms
	if s := b.board.snapshot(); s.OuterStep != 0 || s.State != "joining" {
		t.Fatalf("the restarted member is at step %d, %s; want 0, joining", s.OuterStep, s.State)
	}
	ca.MaxOuterSteps, ca.Bootstrap = 4, b.host.Addrs()
	a = c.add(ca)
	c.start(ctx, nil, a)()
	waitB()
	waitF()
	for _, n := range []*Node{a, b, f} {
		if n.model.Step() != 4 || n.model.Hash() != a.model.Hash() {
			t.Fatalf("%s ends at step %d %s, want 4 %s", n.self, n.model.Step(), short(n.model.Hash()), short(a.model.Hash()))
		}
		for _, r := range n.board.historyList() {
			if r.Step == 1 {
				t.Fatalf("%s made a step 1 after the restart (a line from the initial model)", n.self)
			}
		}
	}
}
