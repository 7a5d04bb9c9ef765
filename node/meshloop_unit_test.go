package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/prometheus/client_golang/prometheus"
)

// unitHost starts a libp2p host on loopback (not Started: no gossip) and
// closes it with the test.
func unitHost(t *testing.T) *p2p.Host {
	t.Helper()
	h, err := p2p.New(context.Background(), p2p.Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"},
		Run: "unit", Logger: unitLog, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// unitMeshNode is a node with what the mesh goroutine needs, on host h (nil:
// none), publishing through it.
func unitMeshNode(h *p2p.Host) *Node {
	log := slog.New(slog.DiscardHandler)
	n := &Node{cfg: Config{Tick: time.Millisecond, RingOrder: "sorted", Logger: log}, log: log, host: h,
		meshCmds: make(chan meshCmd, 8), events: make(chan diloco.Event, 8)}
	if h != nil {
		n.self, n.pub = mesh.PeerID(h.ID().String()), h
	}
	return n
}

// recvEvent returns the next event of n, failing after a second.
func recvEvent(t *testing.T, n *Node) diloco.Event {
	t.Helper()
	select {
	case ev := <-n.events:
		return ev
	case <-time.After(time.Second):
		t.Fatal("no mesh event")
		return diloco.Event{}
	}
}

// TestCarryOutEvents pins carryOut: a Ready's ring, fetch and adoption go to
// the training goroutine in that order, adoption flagged, and the mesh is
// advanced past them.
func TestCarryOutEvents(t *testing.T) {
	n := unitMeshNode(nil)
	m := newLoneMesh(t, mesh.Config{}, 0, "h0")
	ring := &mesh.Ring{Step: 0, Members: []mesh.PeerID{"a"}}
	fetch := &mesh.Fetch{Step: 3, Hash: "h3"}
	adopt := &mesh.Fetch{Step: 9, Hash: "h9"}
	n.carryOut(context.Background(), m, mesh.Ready{Ring: ring, Fetch: fetch, Adopt: adopt, State: m.State()}, n.log)
	evs := []diloco.Event{recvEvent(t, n), recvEvent(t, n), recvEvent(t, n)}
	if evs[0].Ring != ring || evs[0].Fetch != nil {
		t.Fatalf("first event %+v, want the ring", evs[0])
	}
	if evs[1].Fetch != fetch || evs[1].Adopt {
		t.Fatalf("second event %+v, want the fetch, not an adoption", evs[1])
	}
	if evs[2].Fetch != adopt || !evs[2].Adopt {
		t.Fatalf("third event %+v, want the adoption", evs[2])
	}
	if m.HasReady() {
		t.Fatal("the mesh was not advanced")
	}
}

// TestCarryOutDeadAbortsAttempt pins that peers declared dead abort the
// attempt in flight when in its ring, and only then.
func TestCarryOutDeadAbortsAttempt(t *testing.T) {
	for _, c := range []struct {
		dead  []mesh.PeerID
		abort bool
	}{{[]mesh.PeerID{"x"}, false}, {[]mesh.PeerID{"x", "c"}, true}, {nil, false}} {
		n := unitMeshNode(nil)
		m := newLoneMesh(t, mesh.Config{}, 0, "h0")
		ctx := n.inflight.begin(context.Background(), &mesh.Ring{Members: []mesh.PeerID{"a", "c"}})
		n.carryOut(context.Background(), m, mesh.Ready{Dead: c.dead, State: m.State()}, n.log)
		if aborted := ctx.Err() != nil; aborted != c.abort {
			t.Errorf("dead %v: aborted %v, want %v", c.dead, aborted, c.abort)
		}
		n.inflight.end()
	}
}

// TestCarryOutState pins that a state change is published on the board.
func TestCarryOutState(t *testing.T) {
	n := unitMeshNode(nil)
	m := newLoneMesh(t, mesh.Config{}, 0, "h0")
	n.carryOut(context.Background(), m, mesh.Ready{State: mesh.StateReducing, StateChanged: false}, n.log)
	if s := n.board.snapshot().State; s != "" {
		t.Fatalf("state published without a change: %q", s)
	}
	n.carryOut(context.Background(), m, mesh.Ready{State: mesh.StateSyncing, StateChanged: true}, n.log)
	if s := n.board.snapshot().State; s != "syncing" {
		t.Fatalf("board state %q, want syncing", s)
	}
}

// failingPublisher fails every publication, counting them.
type failingPublisher struct{ tried *int }

func (p failingPublisher) PublishTo(context.Context, string, []byte) error {
	*p.tried++
	return errors.New("no gossip")
}

// TestCarryOutPublishFailure pins that a message that cannot be published
// is dropped, and the rest of the Ready still carried out.
func TestCarryOutPublishFailure(t *testing.T) {
	n := unitMeshNode(unitHost(t))
	var tried int
	n.pub = failingPublisher{&tried}
	m, err := mesh.New(mesh.Config{ID: n.self}, 0, "h0")
	if err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	if len(rd.Messages) == 0 {
		t.Fatal("a new mesh has no heartbeat to send")
	}
	rd.Ring = &mesh.Ring{Members: []mesh.PeerID{n.self}}
	n.carryOut(context.Background(), m, rd, n.log)
	if tried != len(rd.Messages) {
		t.Fatalf("%d publications tried, want the Ready's %d messages", tried, len(rd.Messages))
	}
	if ev := recvEvent(t, n); ev.Ring != rd.Ring {
		t.Fatal("ring not delivered after a publish failure")
	}
	if m.HasReady() {
		t.Fatal("unpublished messages kept")
	}
}

// TestSendEventCancelled pins that handing an event to a training goroutine
// that no longer reads gives up when ctx ends.
func TestSendEventCancelled(t *testing.T) {
	n := &Node{events: make(chan diloco.Event)} // nobody reads
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() {
		n.sendEvent(ctx, diloco.Event{Ring: &mesh.Ring{}})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("sendEvent blocked after ctx ended")
	}
}

// TestPeerStatusTable pins the REST view of a peer: its state ("gone" when
// dead), step, hash, and when it was last seen, counted back in ticks.
func TestPeerStatusTable(t *testing.T) {
	n := unitMeshNode(nil)
	n.cfg.Tick = 100 * time.Millisecond
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name  string
		p     mesh.PeerStatus
		tick  uint64
		state string
		seen  time.Time
	}{
		{"training, seen now", mesh.PeerStatus{ID: "b", State: mesh.StateTraining, Step: 4, Hash: "h4", LastSeen: 50}, 50, "training", now},
		{"ready, 10 ticks ago", mesh.PeerStatus{ID: "b", State: mesh.StateReady, LastSeen: 40}, 50, "ready", now.Add(-time.Second)},
		{"dead", mesh.PeerStatus{ID: "b", State: mesh.StateTraining, Dead: true, LastSeen: 0}, 300, "gone", now.Add(-30 * time.Second)},
		{"left", mesh.PeerStatus{ID: "b", State: mesh.StateLeft, Dead: true, LastSeen: 7}, 7, "gone", now},
		{"joining", mesh.PeerStatus{ID: "b", State: mesh.StateJoining, LastSeen: 3}, 3, "joining", now},
		{"seen after the tick: now, not the future", mesh.PeerStatus{ID: "b", State: mesh.StateSyncing, LastSeen: 60}, 50, "syncing", now},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps := n.peerStatus(c.p, c.tick, now)
			if ps.ID != string(c.p.ID) || ps.State != c.state || ps.OuterStep != c.p.Step || ps.ModelHash != c.p.Hash {
				t.Fatalf("peer status %+v", ps)
			}
			if !ps.LastSeen.Equal(c.seen) {
				t.Fatalf("last seen %v, want %v", ps.LastSeen, c.seen)
			}
			if ps.Connected || ps.LatencyMs != 0 {
				t.Fatalf("a peer id that is not libp2p's is connected: %+v", ps)
			}
		})
	}
}

// TestUpdatePeers pins updatePeers: the board's peer table, state and the
// last ring's members are refreshed; peers this node is not connected to
// are unreachable, as it is behind a NAT (a host on loopback counts so).
func TestUpdatePeers(t *testing.T) {
	n := unitMeshNode(unitHost(t))
	other := mesh.PeerID(unitPeerID(t).String())
	st := mesh.Status{ID: n.self, State: mesh.StateReducing, Tick: 10,
		Ring: &mesh.Ring{Members: []mesh.PeerID{n.self, other}},
		Peers: []mesh.PeerStatus{
			{ID: other, State: mesh.StateReducing, Step: 2, LastSeen: 10},
			{ID: "zz", State: mesh.StateTraining, Dead: true},
		}}
	costs := n.updatePeers(st)
	if len(costs) != 2 || costs[other] != mesh.LinkUnreachable || costs["zz"] != mesh.LinkUnreachable {
		t.Fatalf("costs %v for peers not connected", costs)
	}
	ps := n.board.peerList()
	if len(ps) != 2 || ps[0].ID != string(other) || ps[0].State != "reducing" || ps[1].State != "gone" {
		t.Fatalf("peers %+v", ps)
	}
	s := n.board.snapshot()
	if s.State != "reducing" || !slices.Equal(s.Members, []string{string(n.self), string(other)}) {
		t.Fatalf("status state %q members %v", s.State, s.Members)
	}
	// Without a ring the members shown stay those of the last one.
	n.updatePeers(mesh.Status{ID: n.self, State: mesh.StateTraining})
	if s := n.board.snapshot(); s.State != "training" || len(s.Members) != 2 || len(n.board.peerList()) != 0 {
		t.Fatalf("after an empty status: %+v", s)
	}
}

// TestNoteWaiting: a node held to the run's minimum shows on the status
// API what it waits for while it waits, and nothing once it stops.
func TestNoteWaiting(t *testing.T) {
	n := &Node{}
	log := slog.New(slog.DiscardHandler)
	n.noteWaiting(&mesh.Waiting{Need: 3, Have: 2}, log)
	if w := n.board.snapshot().Waiting; w == nil || *w != (Waiting{Members: 3, Have: 2}) {
		t.Fatalf("waiting %+v, want 3 members, have 2", w)
	}
	n.noteWaiting(nil, log)
	if w := n.board.snapshot().Waiting; w != nil {
		t.Fatalf("waiting %+v after it stopped", w)
	}
}

// TestMeshLoopLone pins the mesh goroutine end to end for a lone member on
// a host without gossip: Ready decides a ring handed to the training
// goroutine, Completed moves the mesh on, CaughtUp answers, Leave is carried
// out before its done closes, and the loop ends with its context.
func TestMeshLoopLone(t *testing.T) {
	n := unitMeshNode(unitHost(t))
	m, err := mesh.New(mesh.Config{ID: n.self}, 0, "h0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		n.meshLoop(ctx, m)
		close(stopped)
	}()
	port := nodePort{n}
	port.Ready(0, 5)
	ev := recvEvent(t, n)
	if ev.Ring == nil || ev.Ring.Step != 0 || !slices.Equal(ev.Ring.Members, []mesh.PeerID{n.self}) {
		t.Fatalf("event %+v, want a ring of this node for step 0", ev)
	}
	port.Completed(0, "h1")
	if !port.CaughtUp(ctx) {
		t.Fatal("a lone member is caught up")
	}
	done := make(chan struct{})
	n.meshCmds <- meshCmd{kind: cmdLeave, done: done}
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("leave not carried out")
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		t.Fatal("mesh loop did not end with its context")
	}
	if st := m.Status(); st.State != mesh.StateLeft || st.Step != 1 || st.Hash != "h1" {
		t.Fatalf("mesh after the loop: %v step %d hash %s", st.State, st.Step, st.Hash)
	}
	if s := n.board.snapshot().State; s != "left" {
		t.Fatalf("board state %q, want left", s)
	}
}

// TestPeerStatusLink: a connected peer's row says how it is reached — a
// direct tcp link here, not relayed — as /v1/peers shows it.
func TestPeerStatusLink(t *testing.T) {
	a, b := unitHost(t), unitHost(t)
	if err := a.Libp2p().Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	n := unitMeshNode(a)
	ps := n.peerStatus(mesh.PeerStatus{ID: mesh.PeerID(b.ID().String()), State: mesh.StateTraining}, 0, time.Now())
	if !ps.Connected || ps.Transport != "tcp" || ps.Relayed {
		t.Fatalf("peer row: connected %v transport %q relayed %v", ps.Connected, ps.Transport, ps.Relayed)
	}
}

func TestLinkCost(t *testing.T) {
	pub := []string{"/ip4/45.1.2.3/tcp/4001"}
	home := []string{"/ip4/192.168.1.2/tcp/4001", "/ip4/45.1.2.3/tcp/4001/p2p/12D3KooWGTUCeWHixM69B57JjyYr2puR1FJ4RrnpyWPYv55TA7bt/p2p-circuit"}
	for _, c := range []struct {
		s       PeerStatus
		private bool
		want    uint32
	}{
		{PeerStatus{Connected: true, LatencyMs: 20, Addrs: home}, true, 200},
		{PeerStatus{Connected: true, Relayed: true, LatencyMs: 20, Addrs: home}, false, mesh.LinkUnreachable},
		{PeerStatus{Connected: false, Addrs: home}, false, mesh.LinkUnreachable},
		{PeerStatus{Connected: false, Addrs: pub}, true, mesh.LinkUnreachable},
		{PeerStatus{Connected: false, Addrs: pub}, false, 0},
		{PeerStatus{Connected: true, Addrs: pub}, false, 0},
	} {
		if got := linkCost(c.s, c.private); got != c.want {
			t.Errorf("%+v private=%v: cost %d, want %d", c.s, c.private, got, c.want)
		}
	}
}

// recordingPublisher keeps what is published; over limit bytes it fails as
// the host does.
type recordingPublisher struct {
	sent  *[][]byte
	limit int
}

func (p recordingPublisher) PublishTo(_ context.Context, _ string, b []byte) error {
	if len(b) > p.limit {
		return p2p.ErrMessageTooLarge
	}
	*p.sent = append(*p.sent, b)
	return nil
}

// TestPublishMeshBundles pins that the messages of one Ready go out as
// bundles of up to mesh.MaxBundle, that what the host refuses as too large
// goes one message at a time, and that every receiver gets them back in
// order, signed by their sender, and refuses a bundle with a part from
// another.
func TestPublishMeshBundles(t *testing.T) {
	n := unitMeshNode(nil)
	n.self = "12D3KooWQ3ewGGsGxRNKsC4PUjiMQWxYBGGuzbVSA2nFGcQvhkjH"
	from, err := peer.Decode(string(n.self))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []mesh.Message
	for i := range mesh.MaxBundle + 1 {
		msgs = append(msgs, mesh.Message{Type: mesh.MsgHeartbeat, From: n.self, State: mesh.StateTraining, Step: uint64(i), Hash: "h"})
	}
	for _, c := range []struct {
		limit int
		want  []int // messages per publication
	}{{1 << 16, []int{mesh.MaxBundle, 1}}, {100, []int{1, 1, 1, 1, 1}}} {
		var sent [][]byte
		n.pub = recordingPublisher{&sent, c.limit}
		n.publishMesh(context.Background(), msgs, n.log)
		var got []mesh.Message
		var counts []int
		for _, b := range sent {
			part, err := meshSigned(from, b)
			if err != nil {
				t.Fatal(err)
			}
			got, counts = append(got, part...), append(counts, len(part))
		}
		if !slices.Equal(counts, c.want) || len(got) != len(msgs) {
			t.Fatalf("limit %d: publications of %v messages, want %v", c.limit, counts, c.want)
		}
		for i := range got {
			if got[i].Step != msgs[i].Step {
				t.Fatalf("limit %d: message %d is step %d", c.limit, i, got[i].Step)
			}
		}
	}
	spoofed := slices.Clone(msgs[:2])
	spoofed[1].From = "12D3KooWKnDdG3iXw9eTFijk3EWSunZcFi54Zka4wmtqtt6rPxc8"
	b, err := mesh.EncodeBundle(spoofed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meshSigned(from, b); !errors.Is(err, errSpoofed) {
		t.Fatalf("a bundle with another's message: %v", err)
	}
	if _, err := meshSigned(from, []byte{mesh.BundleVersion, 2}); err == nil {
		t.Fatal("a truncated bundle decoded")
	}
}
