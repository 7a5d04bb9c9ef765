package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fetchRig is a node of a small sim model and a donor host on loopback
// serving whatever snapshot serve holds.
type fetchRig struct {
	n     *Node
	donor mesh.PeerID
	serve *ckpt.Snapshot
}

func newFetchRig(t *testing.T) *fetchRig {
	t.Helper()
	r := &fetchRig{}
	dh := unitHost(t)
	srv, err := ckpt.Serve(dh.Libp2p(), func() *ckpt.Snapshot { return r.serve }, ckpt.ServeConfig{Rate: -1, Logger: unitLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	r.donor = mesh.PeerID(dh.ID().String())
	n, _ := unitMeshNode(unitHost(t))
	n.cfg.Logger, n.met = unitLog, unitMetrics()
	if n.engine, err = newSimEngine(simOptions(21, 1), time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	n.model.theta0 = slices.Clone(n.engine.Params())
	n.model.outer = train.NewOuter(len(n.model.theta0), 1, 0)
	n.model.set(0, func() {})
	n.params = int64(len(n.model.theta0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.host.Libp2p().Connect(ctx, peer.AddrInfo{ID: dh.ID(), Addrs: dh.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	r.n = n
	return r
}

// fetch asks the node to fetch (step, hash) from the donor and returns the
// command it sent the mesh.
func (r *fetchRig) fetch(t *testing.T, step uint64, hash string) meshCmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := &mesh.Fetch{Step: step, Hash: hash, From: []mesh.PeerID{r.donor, r.n.self}}
	if err := r.n.fetch(ctx, f, false); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	select {
	case c := <-r.n.meshCmds:
		return c
	default:
		t.Fatal("fetch told the mesh nothing")
		return meshCmd{}
	}
}

// TestFetchInstallsModel pins a good fetch: θ₀ and v of the donor become the
// node's model at the fetched step, the engine is put on θ₀, and the mesh
// is told Synced with the model's hash.
func TestFetchInstallsModel(t *testing.T) {
	r := newFetchRig(t)
	theta := unitVec(31, int(r.n.params), 1)
	v := unitVec(32, int(r.n.params), 0.1)
	r.serve = ckpt.EncodeSnapshot(12, theta, v, []byte(`{}`))
	c := r.fetch(t, 12, train.Hash(theta))
	if c.kind != cmdSynced || c.step != 12 || c.hash != train.Hash(theta) {
		t.Fatalf("mesh told %+v, want Synced(12, θ's hash)", c)
	}
	m := &r.n.model
	if m.step != 12 || m.hash != train.Hash(theta) || !slices.Equal(m.theta0, theta) || !slices.Equal(m.outer.V, v) {
		t.Fatalf("model step %d; θ₀, v or hash not the donor's", m.step)
	}
	if !slices.Equal(r.n.engine.Params(), theta) {
		t.Fatal("engine not put on the fetched θ₀")
	}
	if s := r.n.board.snapshot(); s.OuterStep != 12 || s.ModelHash != m.hash || s.Download == nil {
		t.Fatalf("board %+v", s)
	}
}

// TestFetchRejectsUnusableModels pins that a model that cannot be this
// node's (another size, a short momentum, a donor lying about the hash) is
// not installed: the mesh is told SyncFailed and the cause counted.
func TestFetchRejectsUnusableModels(t *testing.T) {
	cases := []struct {
		name  string
		serve func(n int) (*ckpt.Snapshot, string) // the snapshot served, the hash asked for
		cause string
	}{
		{"model of another size", func(n int) (*ckpt.Snapshot, string) {
			th := unitVec(40, n+8, 1)
			return ckpt.EncodeSnapshot(5, th, make([]float32, n+8), nil), train.Hash(th)
		}, "unusable"},
		{"momentum of another size", func(n int) (*ckpt.Snapshot, string) {
			th := unitVec(41, n, 1)
			return ckpt.EncodeSnapshot(5, th, make([]float32, n-1), nil), train.Hash(th)
		}, "unusable"},
		{"donor serves another model under the hash", func(n int) (*ckpt.Snapshot, string) {
			want := train.Hash(unitVec(42, n, 1))
			s := ckpt.EncodeSnapshot(5, unitVec(43, n, 1), make([]float32, n), nil)
			s.Hash = want
			return s, want
		}, "download"},
		{"donor has another step", func(n int) (*ckpt.Snapshot, string) {
			th := unitVec(44, n, 1)
			return ckpt.EncodeSnapshot(4, th, make([]float32, n), nil), train.Hash(th)
		}, "download"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newFetchRig(t)
			before := slices.Clone(r.n.model.theta0)
			hash0 := r.n.model.hash
			var hash string
			r.serve, hash = c.serve(int(r.n.params))
			cmd := r.fetch(t, 5, hash)
			if cmd.kind != cmdSyncFailed {
				t.Fatalf("mesh told %+v, want SyncFailed", cmd)
			}
			if got := testutil.ToFloat64(r.n.met.fetchFailures.WithLabelValues(c.cause)); got != 1 {
				t.Fatalf("%s failures %v, want 1", c.cause, got)
			}
			m := &r.n.model
			if m.step != 0 || m.hash != hash0 || !slices.Equal(m.theta0, before) || !slices.Equal(r.n.engine.Params(), before) {
				t.Fatal("a rejected model was installed")
			}
		})
	}
}

// TestFetchCancelled pins that a fetch cut short by shutdown returns the
// context's error and tells the mesh nothing.
func TestFetchCancelled(t *testing.T) {
	r := newFetchRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	th := unitVec(50, int(r.n.params), 1)
	err := r.n.fetch(ctx, &mesh.Fetch{Step: 3, Hash: train.Hash(th), From: []mesh.PeerID{r.donor}}, true)
	if err == nil {
		t.Fatal("cancelled fetch returned nil")
	}
	select {
	case c := <-r.n.meshCmds:
		t.Fatalf("cancelled fetch told the mesh %+v", c)
	default:
	}
}
