package node

import (
	"context"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
)

// TestNewcomersAdmittedFewPerStep: three nodes join an open run of two at
// once, after its line is mesh.MadeWindow steps old. A step admits
// max(1, ⌊¼ · established⌋) = 1 newcomer, so the founders' rings grow by
// at most one member a step until all five are in (each joiner got the
// line's history with the model, its donor's snapshot, so all agree who is
// a newcomer).
func TestNewcomersAdmittedFewPerStep(t *testing.T) {
	c := newCluster(t, "admit-test")
	a := c.add(c.config(0))
	b := c.add(c.config(0))
	if a.run.admitRate() != openAdmitRate {
		t.Fatalf("open run admits at rate %g", a.run.admitRate())
	}
	runCtx, stop := context.WithCancel(c.ctx)
	wait := c.start(runCtx, nil, a, b)
	defer func() { stop(); wait() }()
	c.awaitStep(mesh.MadeWindow+1, a, b)
	joinedAt := len(a.board.historyList())
	var joiners []*Node
	for range 3 {
		cfg := c.config(0)
		// Not a ring of joiners at step 0 before they hear of the pair
		// (their steps take a millisecond here).
		cfg.MinMembers = 6
		joiners = append(joiners, c.add(cfg))
	}
	waitJoiners := c.start(runCtx, nil, joiners...)
	defer waitJoiners()
	c.await("a ring of all five", func() bool {
		h := a.board.historyList()
		return h[len(h)-1].Members == 5
	})
	stop()
	h := a.board.historyList()
	var sizes []int
	for i := joinedAt - 1; i < len(h); i++ {
		sizes = append(sizes, h[i].Members)
		if i >= joinedAt && h[i].Members > h[i-1].Members+1 {
			t.Fatalf("step %d: ring of %d after one of %d; ring sizes since the joiners started %v", h[i].Step, h[i].Members, h[i-1].Members, sizes)
		}
	}
	t.Logf("ring sizes since the joiners started: %v", sizes)
	for _, j := range joiners {
		if fetches(t, j) == 0 {
			t.Fatalf("joiner %s never fetched the model", j.self)
		}
	}
	if st := a.board.snapshot(); st.Newcomer {
		t.Fatal("a founder counts itself a newcomer")
	}
}
