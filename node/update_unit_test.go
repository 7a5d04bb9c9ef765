package node

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/train"
)

// A member one step behind the line makes the line's model from the step's
// update (Δ̄, half a snapshot's bytes) and its own model; an update that
// does not make the line's model, or a fetch that is not one step past its
// model, is fetched as the whole snapshot.
func TestFetchByStepUpdate(t *testing.T) {
	r := newFetchRig(t)
	p := int(r.n.params)
	g11, v11 := unitVec(51, p, 1), unitVec(52, p, 0.1)
	if err := r.n.model.Set(11, slices.Clone(g11), slices.Clone(v11)); err != nil {
		t.Fatal(err)
	}
	avg := unitVec(53, p, 0.01)
	g12, v12 := slices.Clone(g11), slices.Clone(v11)
	(&diloco.Outer{LR: 1, V: v12}).Apply(g12, g12, avg)
	h12 := train.Hash(g12)
	r.serveUpd = ckpt.EncodeUpdate(11, h12, avg, []byte(`{}`))
	r.serve = ckpt.EncodeSnapshot(12, g12, v12, []byte(`{}`))
	fetch := func(prev string) *diloco.Fetched {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r.n.wanted.Store(&fetchKey{12, h12})
		got, err := r.n.fetch(ctx, &mesh.Fetch{Step: 12, Hash: h12, PrevHash: prev, From: []mesh.PeerID{r.donor}}, false)
		if err != nil || got == nil || got.Step != 12 || train.Hash(got.Theta0) != h12 || !slices.Equal(got.Momentum, v12) {
			t.Fatalf("fetch of step 12 (prev %.8s): %v, %+v", prev, err, got)
		}
		return got
	}
	fetch(train.Hash(g11))
	if s := r.srv.Stats(); s.BytesServed != 0 || r.srvUpd.Stats().BytesServed < 4*int64(p) {
		t.Fatalf("by update: snapshot bytes %d, update bytes %d", s.BytesServed, r.srvUpd.Stats().BytesServed)
	}
	// The mesh does not know the predecessor: the snapshot.
	fetch("")
	snapBytes := r.srv.Stats().BytesServed
	if snapBytes < 8*int64(p) {
		t.Fatalf("no predecessor: snapshot bytes %d", snapBytes)
	}
	// A donor's update that does not make the line's model: the snapshot.
	r.serveUpd = ckpt.EncodeUpdate(11, h12, unitVec(54, p, 0.01), []byte(`{}`))
	fetch(train.Hash(g11))
	if r.srv.Stats().BytesServed < 2*snapBytes {
		t.Fatalf("a wrong update was not replaced by the snapshot")
	}
	if got := r.n.model.Step(); got != 11 {
		t.Fatalf("fetching changed the model to step %d; the loop applies it", got)
	}
}

// TestStepUpdatePacked: the update two members serve after a step of the
// shipped averaging (robust, int8) packs to under 1.5 bytes a parameter —
// its values come from the codec's tables — where the snapshot takes 8.
func TestStepUpdatePacked(t *testing.T) {
	if testing.Short() {
		t.Skip("two nodes")
	}
	c := newCluster(t, "update-packed")
	a := c.add(c.config(2))
	b := c.add(c.config(2))
	c.runAll(a, b)
	for _, n := range []*Node{a, b} {
		s := n.updateSnapshot()
		if s == nil {
			t.Fatalf("%s serves no update", n.self)
		}
		per := float64(len(s.Data)) / float64(n.params)
		t.Logf("%s: update of step %d in %d bytes, %.3f a parameter", n.self, s.Step, len(s.Data), per)
		if per > 1.5 {
			t.Fatalf("%s: update takes %.2f bytes a parameter, want ≤ 1.5", n.self, per)
		}
	}
}

// TestDownloadClearedWhenFetchEnds: the board shows a download while one
// runs and none once it ended, succeeded or failed (a reader took a fetch
// that failed half-way for one still running).
func TestDownloadClearedWhenFetchEnds(t *testing.T) {
	r := newFetchRig(t)
	p := int(r.n.params)
	g, v := unitVec(61, p, 1), unitVec(62, p, 0.1)
	r.serve = ckpt.EncodeSnapshot(3, g, v, []byte(`{}`))
	var seen atomic.Bool
	r.n.cfg.OnProgress = func(Progress) {
		if r.n.board.snapshot().Download != nil {
			seen.Store(true)
		}
	}
	for _, hash := range []string{r.serve.Hash, train.Hash(v)} { // the second: no donor has it
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r.n.wanted.Store(&fetchKey{3, hash})
		got, err := r.n.fetch(ctx, &mesh.Fetch{Step: 3, Hash: hash, From: []mesh.PeerID{r.donor}}, false)
		cancel()
		if ok := hash == r.serve.Hash; err != nil || (got != nil) != ok {
			t.Fatalf("fetch of %.8s: %v, got a model %v, want %v", hash, err, got != nil, ok)
		}
		if d := r.n.board.snapshot().Download; d != nil {
			t.Fatalf("after the fetch of %.8s the board shows a download: %+v", hash, d)
		}
	}
	if !seen.Load() {
		t.Fatal("the board showed no download while one ran")
	}
}
