package node

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
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
	// serveUpd is the step update the donor serves; srv and srvUpd count
	// what each protocol served.
	serveUpd    *ckpt.Snapshot
	srv, srvUpd *ckpt.Server
}

func newFetchRig(t *testing.T) *fetchRig {
	t.Helper()
	r := &fetchRig{}
	dh := unitHost(t)
	var err error
	r.srv, err = ckpt.Serve(dh.Libp2p(), func() *ckpt.Snapshot { return r.serve }, ckpt.ServeConfig{Rate: -1, Logger: unitLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	r.srvUpd, err = ckpt.Serve(dh.Libp2p(), func() *ckpt.Snapshot { return r.serveUpd }, ckpt.ServeConfig{Rate: -1, Logger: unitLog, Update: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srvUpd.Close() })
	r.donor = mesh.PeerID(dh.ID().String())
	n := unitMeshNode(unitHost(t))
	n.cfg.Logger, n.met = unitLog, unitMetrics()
	if n.engine, err = newSimEngine(simOptions(21, 1), time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	theta0 := slices.Clone(n.engine.Params())
	n.model = diloco.NewModel(0, theta0, diloco.NewOuter(len(theta0), 1, 0))
	n.params = int64(len(theta0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.host.Libp2p().Connect(ctx, peer.AddrInfo{ID: dh.ID(), Addrs: dh.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	r.n = n
	return r
}

// fetch asks the node to fetch (step, hash) from the donor and returns
// what it fetched and the command it sent the mesh, if any.
func (r *fetchRig) fetch(t *testing.T, step uint64, hash string) (*diloco.Fetched, *meshCmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := &mesh.Fetch{Step: step, Hash: hash, From: []mesh.PeerID{r.donor, r.n.self}}
	r.n.wanted.Store(&fetchKey{step, hash})
	got, err := nodePort{r.n}.Fetch(ctx, diloco.Event{Fetch: f})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	select {
	case c := <-r.n.meshCmds:
		return got, &c
	default:
		return got, nil
	}
}

// TestFetchVerifiesModel pins a good fetch: θ₀, v and the history of the
// donor come back for the loop to install (this node's model and engine are
// the loop's to change, and the mesh hears Synced from it), and the board
// shows no download once it ended (TestDownloadClearedWhenFetchEnds).
func TestFetchVerifiesModel(t *testing.T) {
	r := newFetchRig(t)
	theta := unitVec(31, int(r.n.params), 1)
	v := unitVec(32, int(r.n.params), 0.1)
	r.serve = ckpt.EncodeSnapshot(12, theta, v, []byte(`{}`))
	before := theta0Of(r.n.model)
	got, c := r.fetch(t, 12, train.Hash(theta))
	if c != nil {
		t.Fatalf("fetch told the mesh %+v", *c)
	}
	if got == nil || got.Step != 12 || !slices.Equal(got.Theta0, theta) || !slices.Equal(got.Momentum, v) {
		t.Fatalf("fetched %+v, want the donor's step 12", got)
	}
	if r.n.model.Step() != 0 || !slices.Equal(theta0Of(r.n.model), before) || !slices.Equal(r.n.engine.Params(), before) {
		t.Fatal("fetch changed the model itself")
	}
	if d := r.n.board.snapshot().Download; d != nil {
		t.Fatalf("the board shows a download after it ended: %+v", d)
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
			before := slices.Clone(theta0Of(r.n.model))
			hash0 := r.n.model.Hash()
			var hash string
			r.serve, hash = c.serve(int(r.n.params))
			got, cmd := r.fetch(t, 5, hash)
			if got != nil || cmd == nil || cmd.kind != cmdSyncFailed {
				t.Fatalf("fetched %v, mesh told %+v, want SyncFailed", got, cmd)
			}
			if got := testutil.ToFloat64(r.n.met.fetchFailures.WithLabelValues(c.cause)); got != 1 {
				t.Fatalf("%s failures %v, want 1", c.cause, got)
			}
			m := r.n.model
			if m.Step() != 0 || m.Hash() != hash0 || !slices.Equal(theta0Of(m), before) || !slices.Equal(r.n.engine.Params(), before) {
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
	got, err := r.n.fetch(ctx, &mesh.Fetch{Step: 3, Hash: train.Hash(th), From: []mesh.PeerID{r.donor}}, true)
	if err == nil || got != nil {
		t.Fatalf("cancelled fetch returned %v, %v", got, err)
	}
	select {
	case c := <-r.n.meshCmds:
		t.Fatalf("cancelled fetch told the mesh %+v", c)
	default:
	}
}

// TestFetchBackoff: retries of a failing fetch wait half a second, then
// twice as long each time up to a minute; a repeated reason is a repeat
// (logged once as a warning); success starts over.
func TestFetchBackoff(t *testing.T) {
	b := backoff{base: fetchRetryBase, limit: fetchRetryLimit}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	for i, w := range want {
		got, repeat := b.failed("too big")
		if got != w || repeat != (i > 0) {
			t.Fatalf("failure %d: wait %v repeat %v, want %v %v", i+1, got, repeat, w, i > 0)
		}
	}
	for range 20 {
		b.failed("too big")
	}
	if got, _ := b.failed("too big"); got != time.Minute {
		t.Fatalf("wait after many failures: %v, want the one-minute cap", got)
	}
	if _, repeat := b.failed("another reason"); repeat {
		t.Fatal("a new reason counted as a repeat")
	}
	b.succeeded()
	if got, repeat := b.failed("too big"); got != fetchRetryBase || repeat {
		t.Fatalf("after a success: wait %v repeat %v", got, repeat)
	}
}

// TestReachableDonors: donors this node is connected to directly come
// first and alone; without any, all are tried.
func TestReachableDonors(t *testing.T) {
	h, other := unitHost(t), unitHost(t)
	n := unitMeshNode(h)
	if err := h.Libp2p().Connect(context.Background(), peer.AddrInfo{ID: other.ID(), Addrs: other.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	stranger := mesh.PeerID(unitPeerID(t).String())
	near := mesh.PeerID(other.ID().String())
	got := n.reachableDonors([]mesh.PeerID{stranger, n.self, near})
	if len(got) != 1 || got[0] != other.ID() {
		t.Fatalf("donors %v, want only the connected %s", got, other.ID())
	}
	if got := n.reachableDonors([]mesh.PeerID{stranger, n.self}); len(got) != 1 || got[0].String() != string(stranger) {
		t.Fatalf("donors %v, want the one unconnected donor", got)
	}
}

// TestFetchSkipsStaleRequests: a fetch request the mesh no longer asks for
// (it synced since, or asked for another model after its sync timeout
// while a slow download ran) is not carried out: no download, nothing told
// the mesh. A request that went stale during its download and failed does
// not tell the mesh SyncFailed either: that would drop the fetch it asks
// for now.
func TestFetchSkipsStaleRequests(t *testing.T) {
	r := newFetchRig(t)
	theta := unitVec(41, int(r.n.params), 1)
	r.serve = ckpt.EncodeSnapshot(12, theta, unitVec(42, int(r.n.params), 0.1), []byte(`{}`))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	noCmd := func(what string) {
		t.Helper()
		select {
		case c := <-r.n.meshCmds:
			t.Fatalf("%s told the mesh %+v", what, c)
		default:
		}
	}
	f := &mesh.Fetch{Step: 12, Hash: train.Hash(theta), From: []mesh.PeerID{r.donor}}
	for _, w := range []*fetchKey{nil, {13, "newer"}} {
		r.n.wanted.Store(w)
		got, err := nodePort{r.n}.Fetch(ctx, diloco.Event{Fetch: f})
		if got != nil || err != nil {
			t.Fatalf("mesh wants %+v: stale fetch returned %v, %v", w, got, err)
		}
		noCmd("a skipped fetch")
	}
	if s := r.n.board.snapshot(); s.Download != nil {
		t.Fatalf("a stale request was downloaded: %+v", *s.Download)
	}
	r.n.wanted.Store(&fetchKey{13, "newer"})
	got, err := r.n.fetch(ctx, &mesh.Fetch{Step: 11, Hash: "gone", From: []mesh.PeerID{r.donor}}, false)
	if got != nil || err != nil {
		t.Fatalf("failed stale fetch returned %v, %v", got, err)
	}
	noCmd("a failed stale fetch")
}

// TestNoteWanted: the node's record of the wanted model follows the mesh:
// set while it is Syncing, cleared once it synced.
func TestNoteWanted(t *testing.T) {
	n := unitMeshNode(nil)
	m, err := mesh.New(mesh.Config{ID: "me", HeartbeatTicks: 2, DeadTicks: 50, SyncTimeoutTicks: 1000}, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Step(mesh.Message{Type: mesh.MsgHeartbeat, From: "a", State: mesh.StateTraining, Step: 3, Hash: "h3", PrevHash: "h2"}); err != nil {
		t.Fatal(err)
	}
	var f *mesh.Fetch
	for range 4 {
		m.Tick()
		for m.HasReady() {
			rd := m.Ready()
			f = cmp.Or(rd.Fetch, f)
			m.Advance(rd)
		}
	}
	if f == nil || f.Step != 3 {
		t.Fatalf("joiner's fetch %+v, want step 3", f)
	}
	n.noteWanted(m)
	if n.stale(f) {
		t.Fatal("the fetch the mesh asks for is stale")
	}
	m.Synced(3, "h3", nil)
	n.noteWanted(m)
	if !n.stale(f) {
		t.Fatal("a fetch of the model the mesh synced is still wanted")
	}
}
