package node

import (
	"math/rand/v2"
	"slices"
	"testing"

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

// TestSnapshotHashIsModelHash: the node takes the gossiped model hash from
// the donor snapshot it encodes anyway; both must be train.Hash(θ₀).
func TestSnapshotHashIsModelHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	theta := make([]float32, 4097)
	for i := range theta {
		theta[i] = rng.Float32() - 0.5
	}
	nd := &Node{theta0: theta, outer: train.NewOuter(len(theta), 0.7, 0.9), params: int64(len(theta))}
	if got, want := nd.publishSnapshot(), train.Hash(theta); got != want {
		t.Fatalf("snapshot hash %s, train.Hash %s", got, want)
	}
}
