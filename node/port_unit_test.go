package node

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
)

// TestRingCaughtUpTable pins which members of the last ring hold a drain:
// only a live, not-left member of the ring seen behind this node's step.
func TestRingCaughtUpTable(t *testing.T) {
	ring := &mesh.Ring{Step: 4, Members: []mesh.PeerID{"a", "b", "c"}}
	peer := func(id mesh.PeerID, step uint64) mesh.PeerStatus {
		return mesh.PeerStatus{ID: id, Step: step, State: mesh.StateTraining}
	}
	cases := []struct {
		name  string
		ring  *mesh.Ring
		step  uint64
		peers []mesh.PeerStatus
		want  bool
	}{
		{"no ring yet", nil, 5, []mesh.PeerStatus{peer("b", 5)}, true},
		{"all at our step", ring, 5, []mesh.PeerStatus{peer("b", 5), peer("c", 5)}, true},
		{"all beyond our step", ring, 5, []mesh.PeerStatus{peer("b", 6), peer("c", 9)}, true},
		{"one behind", ring, 5, []mesh.PeerStatus{peer("b", 5), peer("c", 4)}, false},
		{"both behind", ring, 5, []mesh.PeerStatus{peer("b", 4), peer("c", 4)}, false},
		{"behind but dead", ring, 5, []mesh.PeerStatus{peer("b", 5), {ID: "c", Step: 4, Dead: true}}, true},
		{"behind but left", ring, 5, []mesh.PeerStatus{peer("b", 5), {ID: "c", Step: 4, State: mesh.StateLeft}}, true},
		{"behind, left and dead", ring, 5, []mesh.PeerStatus{{ID: "b", Step: 0, State: mesh.StateLeft, Dead: true}, peer("c", 5)}, true},
		{"forgotten members", ring, 5, nil, true},
		{"one forgotten, one behind", ring, 5, []mesh.PeerStatus{peer("c", 3)}, false},
		{"behind, not a ring member, still holds", ring, 5, []mesh.PeerStatus{peer("b", 5), peer("c", 5), peer("d", 1)}, false},
		{"behind, not a ring member, left", ring, 5, []mesh.PeerStatus{peer("b", 5), peer("c", 5), {ID: "d", Step: 1, State: mesh.StateLeft}}, true},
		{"self behind is not waited for", ring, 5, []mesh.PeerStatus{peer("a", 0), peer("b", 5), peer("c", 5)}, true},
		{"Ready at our step counts", ring, 5, []mesh.PeerStatus{{ID: "b", Step: 5, State: mesh.StateReady}, peer("c", 5)}, true},
		{"Syncing behind holds", ring, 5, []mesh.PeerStatus{{ID: "b", Step: 2, State: mesh.StateSyncing}, peer("c", 5)}, false},
		{"step 0, nobody can be behind", ring, 0, []mesh.PeerStatus{peer("b", 0), peer("c", 0)}, true},
		{"a non-member fetching holds", ring, 5, []mesh.PeerStatus{peer("b", 5), peer("c", 5), {ID: "d", Step: 4, State: mesh.StateSyncing}}, false},
		{"a dead one fetching does not", nil, 5, []mesh.PeerStatus{{ID: "d", Step: 4, State: mesh.StateSyncing, Dead: true}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := mesh.Status{ID: "a", Step: c.step, Ring: c.ring, Peers: c.peers}
			if got := ringCaughtUp(st); got != c.want {
				t.Fatalf("ringCaughtUp = %v, want %v", got, c.want)
			}
		})
	}
}

// newLoneMesh returns a drained mesh of member "a" at step with hash.
func newLoneMesh(t *testing.T, cfg mesh.Config, step uint64, hash string) *mesh.Mesh {
	t.Helper()
	cfg.ID = "a"
	m, err := mesh.New(cfg, step, hash)
	if err != nil {
		t.Fatal(err)
	}
	drainMesh(m)
	return m
}

// drainMesh carries out (drops) every Ready of m, returning them.
func drainMesh(m *mesh.Mesh) []mesh.Ready {
	var out []mesh.Ready
	for m.HasReady() {
		rd := m.Ready()
		out = append(out, rd)
		m.Advance(rd)
	}
	return out
}

// readyRing returns the last ring decided in rds, if any.
func readyRing(rds []mesh.Ready) *mesh.Ring {
	var r *mesh.Ring
	for _, rd := range rds {
		if rd.Ring != nil {
			r = rd.Ring
		}
	}
	return r
}

// sentTypes lists the types of the messages in rds, in order.
func sentTypes(rds []mesh.Ready) []mesh.MsgType {
	var ts []mesh.MsgType
	for _, rd := range rds {
		for _, m := range rd.Messages {
			ts = append(ts, m.Type)
		}
	}
	return ts
}

// TestMeshCmdReady pins cmdReady: the member is Ready for that step with its
// inner steps, and (alone) decides a ring of itself weighted by them.
func TestMeshCmdReady(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 3, "h3")
	meshCmd{kind: cmdReady, step: 3, n: 7}.apply(m)
	rds := drainMesh(m)
	if !slices.Contains(sentTypes(rds), mesh.MsgReady) {
		t.Fatalf("no Ready message sent: %v", sentTypes(rds))
	}
	r := readyRing(rds)
	if r == nil || r.Step != 3 || !slices.Equal(r.Members, []mesh.PeerID{"a"}) || r.Weights[0] != 7 {
		t.Fatalf("ring %+v, want {a} of step 3 weighted 7", r)
	}
	if m.State() != mesh.StateReducing {
		t.Fatalf("state %v, want Reducing", m.State())
	}
}

// TestMeshCmdReadyOtherStepIgnored pins that a Ready for a step the mesh is
// not at changes nothing.
func TestMeshCmdReadyOtherStepIgnored(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 3, "h3")
	meshCmd{kind: cmdReady, step: 2, n: 7}.apply(m)
	if m.HasReady() || m.State() != mesh.StateTraining {
		t.Fatalf("stale Ready changed the mesh: %v", m.State())
	}
}

// TestMeshCmdCompleted pins cmdCompleted: the mesh moves to step+1 with the
// new hash and trains again.
func TestMeshCmdCompleted(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 0, "h0")
	meshCmd{kind: cmdReady, step: 0, n: 5}.apply(m)
	drainMesh(m)
	meshCmd{kind: cmdCompleted, step: 0, hash: "h1"}.apply(m)
	st := m.Status()
	if st.Step != 1 || st.Hash != "h1" || st.PrevHash != "h0" || st.State != mesh.StateTraining {
		t.Fatalf("after Completed: step %d hash %q prev %q state %v", st.Step, st.Hash, st.PrevHash, st.State)
	}
}

// TestMeshCmdFailed pins cmdFailed: the failure is counted and the step is
// agreed again (alone: a new ring of the same step).
func TestMeshCmdFailed(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 2, "h2")
	meshCmd{kind: cmdReady, step: 2, n: 5}.apply(m)
	first := readyRing(drainMesh(m))
	if first == nil {
		t.Fatal("no ring decided")
	}
	meshCmd{kind: cmdFailed, step: 2, peer: "b"}.apply(m)
	st := m.Status()
	if st.Failures != 1 || st.Step != 2 {
		t.Fatalf("failures %d step %d, want 1 and 2", st.Failures, st.Step)
	}
	again := readyRing(drainMesh(m))
	if again == nil || again.Step != 2 || again.Round <= first.Round || again.ID == first.ID {
		t.Fatalf("no new ring of step 2 in a later round after the failure: first %+v again %+v", first, again)
	}
	// A failure reported for another step is ignored.
	meshCmd{kind: cmdFailed, step: 9, peer: "b"}.apply(m)
	if m.Status().Failures != 1 {
		t.Fatal("failure of another step counted")
	}
}

// TestMeshCmdSynced pins cmdSynced: the mesh holds the fetched model.
func TestMeshCmdSynced(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 0, "h0")
	meshCmd{kind: cmdSynced, step: 7, hash: "h7"}.apply(m)
	if step, hash := m.Model(); step != 7 || hash != "h7" || m.State() != mesh.StateTraining {
		t.Fatalf("after Synced: %d %q %v", step, hash, m.State())
	}
	meshCmd{kind: cmdSynced, step: 8, hash: ""}.apply(m) // no hash: ignored
	if step, _ := m.Model(); step != 7 {
		t.Fatalf("Synced without a hash moved the mesh to %d", step)
	}
}

// TestMeshCmdSyncFailed pins cmdSyncFailed: a joiner picks a model and donors
// again at the next tick, not after the sync timeout.
func TestMeshCmdSyncFailed(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{HeartbeatTicks: 2, DeadTicks: 5, SyncTimeoutTicks: 1000}, 0, "")
	hb := func(step uint64, hash, prev string) {
		t.Helper()
		msg := mesh.Message{Type: mesh.MsgHeartbeat, From: "b", State: mesh.StateTraining, Step: step, Hash: hash, PrevHash: prev}
		if err := m.Step(msg); err != nil {
			t.Fatal(err)
		}
	}
	fetches := func() (out []*mesh.Fetch) {
		for _, rd := range drainMesh(m) {
			if rd.Fetch != nil {
				out = append(out, rd.Fetch)
			}
		}
		return out
	}
	hb(3, "x3", "x2")
	m.Tick()
	m.Tick()
	if f := fetches(); len(f) != 1 || f[0].Step != 3 || m.State() != mesh.StateSyncing {
		t.Fatalf("first fetch %+v, state %v", f, m.State())
	}
	hb(4, "x4", "x3")
	m.Tick()
	if f := fetches(); len(f) != 0 {
		t.Fatalf("fetched again before the sync timeout without SyncFailed: %+v", f)
	}
	meshCmd{kind: cmdSyncFailed}.apply(m)
	m.Tick()
	if f := fetches(); len(f) != 1 || f[0].Step != 4 || f[0].Hash != "x4" {
		t.Fatalf("fetch after SyncFailed %+v", f)
	}
}

// TestMeshCmdStragglerTicks pins cmdStragglerTicks: a Ready member waits
// that many ticks for a live peer that is not Ready, then votes without it.
func TestMeshCmdStragglerTicks(t *testing.T) {
	for _, c := range []struct {
		ticks      int
		wantVoting bool
	}{{3, true}, {50, false}} {
		m := newLoneMesh(t, mesh.Config{HeartbeatTicks: 2, DeadTicks: 100, StragglerTicks: 100}, 0, "h0")
		if err := m.Step(mesh.Message{Type: mesh.MsgHeartbeat, From: "b", State: mesh.StateTraining, Hash: "h0"}); err != nil {
			t.Fatal(err)
		}
		meshCmd{kind: cmdStragglerTicks, n: c.ticks}.apply(m)
		meshCmd{kind: cmdReady, step: 0, n: 5}.apply(m)
		drainMesh(m)
		if m.State() != mesh.StateReady {
			t.Fatalf("ticks %d: state %v right after Ready, want Ready (waiting for b)", c.ticks, m.State())
		}
		for range 10 {
			m.Tick()
		}
		drainMesh(m)
		if voting := m.State() != mesh.StateReady; voting != c.wantVoting {
			t.Errorf("straggler ticks %d: after 10 ticks state %v, voting %v want %v", c.ticks, m.State(), voting, c.wantVoting)
		}
	}
}

// TestMeshCmdCaughtUp pins cmdCaughtUp: it replies ringCaughtUp of the
// mesh's status, false while a ring member is seen behind.
func TestMeshCmdCaughtUp(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 0, "h0")
	ask := func() bool {
		reply := make(chan bool, 1)
		meshCmd{kind: cmdCaughtUp, reply: reply}.apply(m)
		select {
		case ok := <-reply:
			return ok
		default:
			t.Fatal("cmdCaughtUp did not reply")
			return false
		}
	}
	if !ask() {
		t.Fatal("no ring yet: caught up")
	}
	meshCmd{kind: cmdReady, step: 0, n: 5}.apply(m)
	drainMesh(m)
	meshCmd{kind: cmdCompleted, step: 0, hash: "h1"}.apply(m)
	if !ask() {
		t.Fatal("a lone ring is always caught up")
	}
}

// TestMeshCmdCaughtUpWaitsForMember pins cmdCaughtUp against a real mesh of
// two: false while the other ring member is behind, true once it heartbeats
// the new step or leaves.
func TestMeshCmdCaughtUpWaitsForMember(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{HeartbeatTicks: 2, DeadTicks: 100}, 0, "h0")
	step := func(msg mesh.Message) {
		t.Helper()
		msg.From = "b"
		if err := m.Step(msg); err != nil {
			t.Fatal(err)
		}
	}
	step(mesh.Message{Type: mesh.MsgReady, Step: 0, Hash: "h0", InnerSteps: 5})
	meshCmd{kind: cmdReady, step: 0, n: 5}.apply(m)
	for i := 0; i < 200 && m.State() != mesh.StateReducing; i++ {
		// b votes what a votes: copy a's proposals back as b's.
		for _, rd := range drainMesh(m) {
			for _, msg := range rd.Messages {
				if msg.Type == mesh.MsgPropose {
					step(mesh.Message{Type: mesh.MsgPropose, Step: msg.Step, Hash: msg.Hash, Round: msg.Round,
						Members: msg.Members, Excluded: msg.Excluded, InnerSteps: 5})
				}
			}
		}
		if m.State() != mesh.StateReducing {
			m.Tick()
		}
	}
	drainMesh(m)
	st := m.Status()
	if st.State != mesh.StateReducing || st.Ring == nil || len(st.Ring.Members) != 2 {
		t.Fatalf("could not form a ring of two by hand: state %v ring %+v", st.State, st.Ring)
	}
	meshCmd{kind: cmdCompleted, step: 0, hash: "h1"}.apply(m)
	ask := func() bool {
		reply := make(chan bool, 1)
		meshCmd{kind: cmdCaughtUp, reply: reply}.apply(m)
		return <-reply
	}
	if ask() {
		t.Fatal("b is still at step 0: not caught up")
	}
	step(mesh.Message{Type: mesh.MsgHeartbeat, State: mesh.StateTraining, Step: 1, Hash: "h1", PrevHash: "h0"})
	if !ask() {
		t.Fatal("b heartbeats step 1: caught up")
	}
}

// TestMeshCmdLeave pins cmdLeave: the mesh is Left, sends a Leave message,
// and ignores commands after it.
func TestMeshCmdLeave(t *testing.T) {
	m := newLoneMesh(t, mesh.Config{}, 4, "h4")
	meshCmd{kind: cmdLeave}.apply(m)
	rds := drainMesh(m)
	if m.State() != mesh.StateLeft || !slices.Equal(sentTypes(rds), []mesh.MsgType{mesh.MsgLeave}) {
		t.Fatalf("after leave: state %v sent %v", m.State(), sentTypes(rds))
	}
	meshCmd{kind: cmdReady, step: 4, n: 5}.apply(m)
	meshCmd{kind: cmdSynced, step: 9, hash: "h9"}.apply(m)
	if m.HasReady() || m.State() != mesh.StateLeft {
		t.Fatalf("commands after Leave took effect: %v", m.State())
	}
	if step, _ := m.Model(); step != 4 {
		t.Fatalf("Synced after Leave moved the model to %d", step)
	}
}

// TestNodePortSends pins nodePort: each method sends the one command of its
// kind, with its arguments, on n.meshCmds.
func TestNodePortSends(t *testing.T) {
	n := &Node{meshCmds: make(chan meshCmd, 8), events: make(chan diloco.Event)}
	p := nodePort{n}
	cases := []struct {
		call func()
		want meshCmd
	}{
		{func() { p.Ready(3, 7) }, meshCmd{kind: cmdReady, step: 3, n: 7}},
		{func() { p.Completed(3, "h4") }, meshCmd{kind: cmdCompleted, step: 3, hash: "h4"}},
		{func() { p.Failed(&mesh.Ring{Step: 3}, "bad") }, meshCmd{kind: cmdFailed, step: 3, peer: "bad"}},
		{func() { p.Synced(9, "h9", []mesh.Made{{Step: 9, Members: []mesh.PeerID{"a"}}}) }, meshCmd{kind: cmdSynced, step: 9, hash: "h9", hist: []mesh.Made{{Step: 9, Members: []mesh.PeerID{"a"}}}}},
		{func() { p.SyncFailed() }, meshCmd{kind: cmdSyncFailed}},
		{func() { p.SetStragglerTicks(42) }, meshCmd{kind: cmdStragglerTicks, n: 42}},
	}
	for i, c := range cases {
		c.call()
		select {
		case got := <-n.meshCmds:
			if got.kind != c.want.kind || got.step != c.want.step || got.n != c.want.n || got.hash != c.want.hash || got.peer != c.want.peer || !reflect.DeepEqual(got.hist, c.want.hist) {
				t.Errorf("case %d: sent %+v, want %+v", i, got, c.want)
			}
		default:
			t.Errorf("case %d: nothing sent", i)
		}
	}
	if p.Events() != (<-chan diloco.Event)(n.events) {
		t.Fatal("Events is not the node's event channel")
	}
}

// TestNodePortCaughtUp pins nodePort.CaughtUp: the mesh goroutine's reply is
// the answer, and a cancelled context answers false.
func TestNodePortCaughtUp(t *testing.T) {
	n := &Node{meshCmds: make(chan meshCmd, 1)}
	for _, want := range []bool{true, false} {
		go func() {
			c := <-n.meshCmds
			if c.kind != cmdCaughtUp {
				panic("not a cmdCaughtUp")
			}
			c.reply <- want
		}()
		if got := (nodePort{n}).CaughtUp(context.Background()); got != want {
			t.Fatalf("CaughtUp = %v, want %v", got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if (nodePort{n}).CaughtUp(ctx) { // nobody answers
		t.Fatal("CaughtUp true without an answer")
	}
	<-n.meshCmds
}
