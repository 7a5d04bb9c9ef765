package node

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
)

// TestEagerStartIsOuterStepWithOwnDelta: the overlapped loop's local start is
// exactly the outer step the node would take if the average were its own Δ,
// and it leaves the shared momentum untouched.
func TestEagerStartIsOuterStepWithOwnDelta(t *testing.T) {
	const n = 1000
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func() []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	nd := &Node{theta0: vec(), delta: vec(), outer: &train.Outer{LR: 0.7, Momentum: 0.9, V: vec()}}
	vBefore := slices.Clone(nd.outer.V)

	want := make([]float32, n)
	ref := &train.Outer{LR: 0.7, Momentum: 0.9, V: slices.Clone(vBefore)}
	ref.Apply(want, nd.theta0, nd.delta)

	got := make([]float32, n)
	nd.eagerStart(got)
	if !slices.Equal(got, want) {
		t.Fatal("eager start differs from Outer.Apply with the node's own Δ")
	}
	if !slices.Equal(nd.outer.V, vBefore) {
		t.Fatal("eager start changed the outer momentum")
	}
}

// TestSnapshotLazyAndConsistent: donors get θ₀ and v of the current step,
// encoded once per step, and the snapshot's hash is the gossiped model hash.
func TestSnapshotLazyAndConsistent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	theta := make([]float32, 4097)
	for i := range theta {
		theta[i] = rng.Float32() - 0.5
	}
	nd := &Node{theta0: theta, outer: train.NewOuter(len(theta), 0.7, 0.9), params: int64(len(theta))}
	nd.setModel(3, func() {})
	s := nd.snapshot()
	if s.Step != 3 || s.Hash != train.Hash(theta) || s.Hash != nd.hash {
		t.Fatalf("snapshot step %d hash %s; model hash %s", s.Step, s.Hash, nd.hash)
	}
	if nd.snapshot() != s {
		t.Fatal("encoded twice in one step")
	}
	nd.setModel(4, func() { nd.theta0[0]++ })
	s2 := nd.snapshot()
	if s2 == s || s2.Step != 4 || s2.Hash != train.Hash(nd.theta0) {
		t.Fatalf("stale snapshot after the model changed: step %d", s2.Step)
	}
	th, _, _, err := p2p.DecodeSnapshot(s2.Data)
	if err != nil || !slices.Equal(th, nd.theta0) {
		t.Fatalf("decoded θ₀ differs: %v", err)
	}
}
