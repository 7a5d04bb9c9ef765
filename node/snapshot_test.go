package node

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
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
	nd := &Node{model: diloco.NewModel(3, slices.Clone(theta), diloco.NewOuter(len(theta), 0.7, 0.9)), params: int64(len(theta))}
	s := nd.snapshot()
	if s.Step != 3 || s.Hash != train.Hash(theta) || s.Hash != nd.model.Hash() {
		t.Fatalf("snapshot step %d hash %s; model hash %s", s.Step, s.Hash, nd.model.Hash())
	}
	if nd.snapshot() != s {
		t.Fatal("encoded twice in one step")
	}
	theta[0]++
	if err := nd.model.Set(4, slices.Clone(theta), make([]float32, len(theta))); err != nil {
		t.Fatal(err)
	}
	s2 := nd.snapshot()
	if s2 == s || s2.Step != 4 || s2.Hash != train.Hash(theta0Of(nd.model)) {
		t.Fatalf("stale snapshot after the model changed: step %d", s2.Step)
	}
	th, _, state, err := ckpt.DecodeSnapshot(s2.Data)
	if err != nil || !slices.Equal(th, theta0Of(nd.model)) {
		t.Fatalf("decoded θ₀ differs: %v", err)
	}
	if h, err := fetchedHistory(state, 4); h != nil || err != nil {
		t.Fatalf("history before the mesh recorded one: %v, %v", h, err)
	}
	// Once the mesh records who made the step's model, the snapshot is
	// encoded again with it, once, and a joiner reads it back.
	hist := []mesh.Made{{Step: 3, Members: []mesh.PeerID{"a", "b"}}, {Step: 4, Members: []mesh.PeerID{"b", "c"}}}
	nd.history.set(4, nd.model.Hash(), hist)
	s3 := nd.snapshot()
	if s3 == s2 || nd.snapshot() != s3 {
		t.Fatal("the snapshot was not encoded exactly once more with the history")
	}
	if _, _, state, err = ckpt.DecodeSnapshot(s3.Data); err != nil {
		t.Fatal(err)
	}
	if h, err := fetchedHistory(state, 4); err != nil || !reflect.DeepEqual(h, hist) {
		t.Fatalf("history %+v (%v), want %+v", h, err, hist)
	}
	// A donor's history is its word: one that breaks the rules is refused.
	for _, bad := range []string{
		`{"history":[{"step":5,"members":["a"]}]}`,                            // beyond the model's step
		`{"history":[{"step":4,"members":["b","a"]}]}`,                        // unsorted
		`{"history":[{"step":4,"members":[]}]}`,                               // empty ring
		`{"history":[{"step":4,"members":["a"]},{"step":4,"members":["b"]}]}`, // one step twice
		`{"history":`, // not JSON
	} {
		if h, err := fetchedHistory([]byte(bad), 4); err == nil {
			t.Errorf("history %s accepted: %+v", bad, h)
		}
	}
}

// FuzzFetchedHistory: a donor's snapshot state is a peer's bytes. Whatever
// they are, reading the history never panics, and what it accepts the
// mesh accepts as the history of the fetched step.
func FuzzFetchedHistory(f *testing.F) {
	f.Add([]byte(`{"step":4,"history":[{"step":3,"members":["a","b"]},{"step":4,"members":["b"]}]}`), uint64(4))
	f.Add([]byte(`{"history":[{"step":9,"members":["a"]}]}`), uint64(4))
	f.Add([]byte(`{"history":null}`), uint64(0))
	f.Fuzz(func(t *testing.T, state []byte, step uint64) {
		h, err := fetchedHistory(state, step)
		if err != nil {
			return
		}
		if err := mesh.ValidateHistory(step, h); err != nil {
			t.Fatalf("accepted a history the mesh refuses: %v", err)
		}
		m, err := mesh.New(mesh.Config{ID: "x", History: h, AdmitRate: openAdmitRate}, step, "h")
		if err != nil {
			t.Fatalf("mesh.New refused an accepted history: %v", err)
		}
		if got := m.History(); len(got) > len(h) {
			t.Fatalf("history grew: %d entries from %d", len(got), len(h))
		}
	})
}
