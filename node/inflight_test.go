package node

import (
	"context"
	"errors"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

func TestInflightAbortsOnlyForMembers(t *testing.T) {
	var f inflight
	f.abortIfMember([]mesh.PeerID{"x"}) // nothing in flight: no-op
	r := &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}}
	ctx := f.begin(context.Background(), r)
	f.abortIfMember([]mesh.PeerID{"x", "y"})
	if ctx.Err() != nil {
		t.Fatal("aborted for a peer outside the ring")
	}
	f.abortIfMember([]mesh.PeerID{"y", "b"})
	if ctx.Err() == nil {
		t.Fatal("not aborted when a member died")
	}
	var dead *deadMemberError
	if !errors.As(context.Cause(ctx), &dead) || dead.peer != "b" {
		t.Fatalf("cause = %v, want member b dead", context.Cause(ctx))
	}
	f.end()
	ctx2 := f.begin(context.Background(), r)
	f.end()
	if ctx2.Err() == nil {
		t.Fatal("end did not release the attempt's context")
	}
}

func TestCulpritPrefersDeadMember(t *testing.T) {
	n := &Node{self: "b"}
	r := &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}}
	if got := n.culprit(r, &deadMemberError{peer: "c"}); got != "c" {
		t.Fatalf("culprit = %s, want c", got)
	}
	if got := n.culprit(r, &collective.PeerError{Rank: 2}); got != "c" {
		t.Fatalf("culprit of PeerError{2} = %s, want c", got)
	}
	if got := n.culprit(r, context.DeadlineExceeded); got != "a" {
		t.Fatalf("culprit of a timeout = %s, want the left neighbour a", got)
	}
	if got := n.culprit(r, &collective.PeerError{Rank: 1}); got == "b" {
		t.Fatal("culprit is never this node itself")
	}
}

func TestRingCaughtUp(t *testing.T) {
	ring := &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}}
	st := mesh.Status{ID: "a", Step: 5, Ring: ring, Peers: []mesh.PeerStatus{
		{ID: "b", Step: 5}, {ID: "c", Step: 4},
	}}
	if ringCaughtUp(st) {
		t.Fatal("c is still at step 4")
	}
	st.Peers[1].Dead = true
	if !ringCaughtUp(st) {
		t.Fatal("a dead member does not hold the drain")
	}
	st.Peers[1] = mesh.PeerStatus{ID: "c", Step: 4, State: mesh.StateLeft}
	if !ringCaughtUp(st) {
		t.Fatal("a member that left does not hold the drain")
	}
	if !ringCaughtUp(mesh.Status{Step: 1}) {
		t.Fatal("no ring yet: nothing to wait for")
	}
}
