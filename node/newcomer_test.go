package node

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
)

// TestNewcomersAdmittedFewPerStep: three nodes join an open run of two at
// once, after its line is mesh.MadeWindow steps old. A step admits
// max(1, ⌊¼ · established⌋) = 1 newcomer, so the founders' rings grow by
// at most one member a step until all five are in (each joiner got the
// line's history with the model, its donor's snapshot, so all agree who is
// a newcomer).
func TestNewcomersAdmittedFewPerStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := twoNodeConfig(t, 0, false, nil)
	ca.Run = "admit-test"
	alog := &syncBuffer{}
	ca.Logger = slog.New(slog.NewTextHandler(alog, nil))
	a := newNode(t, ctx, ca)
	cb := twoNodeConfig(t, 0, false, a.host.Addrs())
	cb.Run = "admit-test"
	b := newNode(t, ctx, cb)
	if a.run.admitRate() != openAdmitRate {
		t.Fatalf("open run admits at rate %g", a.run.admitRate())
	}
	runCtx, stop := context.WithCancel(ctx)
	wg := runNodes(t, runCtx, a, b)
	defer func() { stop(); wg.Wait() }()
	waitStep(t, []*Node{a, b}, mesh.MadeWindow+1)
	joinedAt := len(a.board.historyList())
	logs := make([]*syncBuffer, 3)
	var joiners []*Node
	for i := range logs {
		logs[i] = &syncBuffer{}
		c := twoNodeConfig(t, 0, false, a.host.Addrs())
		c.Run, c.Logger = "admit-test", slog.New(slog.NewTextHandler(logs[i], nil))
		// Not a ring of joiners at step 0 before they hear of the pair
		// (their steps take a millisecond here).
		c.MinMembers = 6
		joiners = append(joiners, newNode(t, ctx, c))
	}
	jwg := runNodes(t, runCtx, joiners...)
	defer jwg.Wait()
	deadline := time.Now().Add(time.Minute)
	for h := a.board.historyList(); h[len(h)-1].Members != 5; h = a.board.historyList() {
		if time.Now().After(deadline) {
			var sizes []int
			for _, r := range h[joinedAt-1:] {
				sizes = append(sizes, r.Members)
			}
			for i, l := range logs {
				t.Logf("joiner %d:\n%s", i, l.String())
			}
			t.Logf("founder a:\n%s", alog.String())
			for _, n := range append([]*Node{a, b}, joiners...) {
				st := n.board.snapshot()
				t.Logf("%s: state %s step %d members %d newcomer %v", n.self, st.State, st.OuterStep, len(st.Members), st.Newcomer)
			}
			t.Fatalf("no ring of all five in a minute; ring sizes since the joiners started %v", sizes)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	for _, l := range logs {
		if !strings.Contains(l.String(), "model synced") {
			t.Fatalf("a joiner never fetched the model:\n%s", l.String())
		}
	}
	if st := a.board.snapshot(); st.Newcomer {
		t.Fatal("a founder counts itself a newcomer")
	}
}
