package node

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/train"
)

// TestSnapshotLazyAndConsistent: donors get θ₀ and v of the current step,
// encoded once per step, and the snapshot's hash is the gossiped model hash.
func TestSnapshotLazyAndConsistent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	theta := make([]float32, 4097)
	for i := range theta {
		theta[i] = rng.Float32() - 0.5
	}
	nd := &Node{model: globalModel{theta0: theta, outer: train.NewOuter(len(theta), 0.7, 0.9)}, params: int64(len(theta))}
	nd.model.set(3, func() {})
	s := nd.snapshot()
	if s.Step != 3 || s.Hash != train.Hash(theta) || s.Hash != nd.model.hash {
		t.Fatalf("snapshot step %d hash %s; model hash %s", s.Step, s.Hash, nd.model.hash)
	}
	if nd.snapshot() != s {
		t.Fatal("encoded twice in one step")
	}
	nd.model.set(4, func() { nd.model.theta0[0]++ })
	s2 := nd.snapshot()
	if s2 == s || s2.Step != 4 || s2.Hash != train.Hash(nd.model.theta0) {
		t.Fatalf("stale snapshot after the model changed: step %d", s2.Step)
	}
	th, _, _, err := ckpt.DecodeSnapshot(s2.Data)
	if err != nil || !slices.Equal(th, nd.model.theta0) {
		t.Fatalf("decoded θ₀ differs: %v", err)
	}
}
