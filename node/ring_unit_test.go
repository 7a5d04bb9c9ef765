package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCulpritTable pins whom a failed attempt blames: the member the error
// names (a dead member first, then p2p's rank, then mesh's), else the left
// neighbour, and never this node itself.
func TestCulpritTable(t *testing.T) {
	abc := &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}}
	ab := &mesh.Ring{Members: []mesh.PeerID{"a", "b"}}
	cases := []struct {
		name string
		self mesh.PeerID
		ring *mesh.Ring
		err  error
		want mesh.PeerID
	}{
		{"timeout: left neighbour", "b", abc, context.DeadlineExceeded, "a"},
		{"timeout at rank 0: left wraps to the last", "a", abc, context.DeadlineExceeded, "c"},
		{"plain error: left neighbour", "c", abc, errors.New("boom"), "b"},
		{"nil error: left neighbour", "b", abc, nil, "a"},
		{"dead member", "b", abc, &deadMemberError{peer: "c"}, "c"},
		{"dead member wrapped", "b", abc, fmt.Errorf("attempt: %w", &deadMemberError{peer: "a"}), "a"},
		{"dead member beats a PeerError", "b", abc, &ring.PeerError{Rank: 0, Err: &deadMemberError{peer: "c"}}, "c"},
		{"mesh PeerError rank 2", "b", abc, &collective.PeerError{Rank: 2}, "c"},
		{"mesh PeerError rank 0", "b", abc, &collective.PeerError{Rank: 0, Relayed: true}, "a"},
		{"mesh PeerError wrapped", "a", abc, fmt.Errorf("x: %w", &collective.PeerError{Rank: 1}), "b"},
		{"mesh PeerError naming self: right neighbour", "b", abc, &collective.PeerError{Rank: 1}, "c"},
		{"mesh PeerError naming self at the end: wraps", "c", abc, &collective.PeerError{Rank: 2}, "a"},
		{"mesh PeerError rank too large: left neighbour", "b", abc, &collective.PeerError{Rank: 3}, "a"},
		{"mesh PeerError rank negative: left neighbour", "b", abc, &collective.PeerError{Rank: -1}, "a"},
		{"p2p RingPeerError rank 2", "b", abc, &ring.PeerError{Rank: 2}, "c"},
		{"p2p rank wins over its mesh error", "b", abc, &ring.PeerError{Rank: 2, Err: &collective.PeerError{Rank: 0}}, "c"},
		{"p2p rank out of range: its mesh error", "b", abc, &ring.PeerError{Rank: 7, Err: &collective.PeerError{Rank: 2}}, "c"},
		{"p2p rank negative, no mesh error: left", "c", abc, &ring.PeerError{Rank: -1}, "b"},
		{"p2p naming self: right neighbour", "a", abc, &ring.PeerError{Rank: 0}, "b"},
		{"ring of two: the other", "a", ab, context.DeadlineExceeded, "b"},
		{"ring of two, self named: the other", "b", ab, &collective.PeerError{Rank: 1}, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := &Node{self: c.self}
			if got := n.culprit(c.ring, c.err); got != c.want {
				t.Fatalf("culprit = %s, want %s", got, c.want)
			}
		})
	}
}

// TestCulpritNeverSelf pins, over rings of 2..9 and every rank and error
// kind, that the culprit is another member of the ring.
func TestCulpritNeverSelf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 2; k <= 9; k++ {
		r := &mesh.Ring{}
		for i := range k {
			r.Members = append(r.Members, mesh.PeerID(fmt.Sprintf("m%d", i)))
		}
		for rank := range k {
			n := &Node{self: r.Members[rank]}
			for range 30 {
				named := rng.IntN(k+4) - 2 // in and out of range
				for _, err := range []error{&collective.PeerError{Rank: named}, &ring.PeerError{Rank: named}, io.EOF} {
					got := n.culprit(r, err)
					if got == n.self || !slices.Contains(r.Members, got) {
						t.Fatalf("k=%d rank=%d err=%v: culprit %s", k, rank, err, got)
					}
				}
			}
		}
	}
}

// unitMetrics returns metrics on a registry of their own.
func unitMetrics() *metrics {
	return newMetrics(prometheus.NewRegistry(), &board{}, nil)
}

// TestRingReducerFailed pins ringReducer.failed: it returns the culprit and
// counts the failure under its cause.
func TestRingReducerFailed(t *testing.T) {
	n := &Node{self: "b", met: unitMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r := &mesh.Ring{Step: 4, ID: "r", Members: []mesh.PeerID{"a", "b", "c"}}
	cases := []struct {
		err   error
		want  mesh.PeerID
		cause string
	}{
		{&collective.PeerError{Rank: 2}, "c", "peer"},
		{&deadMemberError{peer: "a"}, "a", "peer"},
		{context.DeadlineExceeded, "a", "timeout"},
		{context.Canceled, "a", "canceled"},
		{errors.New("handshake: ring id mismatch"), "a", "other"},
	}
	for _, c := range cases {
		before := testutil.ToFloat64(n.met.arFailures.WithLabelValues(c.cause))
		if got := (ringReducer{n}).Failed(r, c.err); got != c.want {
			t.Errorf("failed(%v) = %s, want %s", c.err, got, c.want)
		}
		if after := testutil.ToFloat64(n.met.arFailures.WithLabelValues(c.cause)); after != before+1 {
			t.Errorf("failed(%v): %s failures %v → %v, want +1", c.err, c.cause, before, after)
		}
	}
}

// unitPeerID returns a fresh, valid libp2p peer id.
func unitPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestPeerID pins peerID: a libp2p id's string form round-trips, anything
// else is an error naming it.
func TestPeerID(t *testing.T) {
	id := unitPeerID(t)
	got, err := peerID(mesh.PeerID(id.String()))
	if err != nil || got != id {
		t.Fatalf("peerID(%s) = %s, %v", id, got, err)
	}
	for _, bad := range []mesh.PeerID{"", "not-a-peer", "Qm"} {
		if _, err := peerID(bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("peerID(%q): err %v, want one naming it", bad, err)
		}
	}
}

// TestAllReduceRefusesBadRings pins the checks allReduce makes before it
// opens a stream: this node must be a member, and every member a peer id.
func TestAllReduceRefusesBadRings(t *testing.T) {
	self := mesh.PeerID(unitPeerID(t).String())
	other := mesh.PeerID(unitPeerID(t).String())
	n := &Node{self: self}
	b := collective.Buffers{Src: make([]float32, 4), Dst: make([]float32, 4)}
	_, err := n.allReduce(context.Background(), &mesh.Ring{ID: "r1", Members: []mesh.PeerID{other}, Weights: []float32{1}}, b)
	if err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("ring without self: %v", err)
	}
	_, err = n.allReduce(context.Background(), &mesh.Ring{ID: "r2", Members: []mesh.PeerID{self, "garbage"}, Weights: []float32{1, 1}}, b)
	if err == nil || !strings.Contains(err.Error(), "bad peer id") {
		t.Fatalf("ring with a bad member id: %v", err)
	}
}

// TestInflightTable pins abortIfMember: it cancels the attempt in flight
// only when one of the dead is in its ring, naming the first such.
func TestInflightTable(t *testing.T) {
	ring := &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}}
	cases := []struct {
		name string
		dead []mesh.PeerID
		want mesh.PeerID // "" not aborted
	}{
		{"none dead", nil, ""},
		{"empty list", []mesh.PeerID{}, ""},
		{"outsiders", []mesh.PeerID{"x", "y", "z"}, ""},
		{"one member", []mesh.PeerID{"c"}, "c"},
		{"outsider then member", []mesh.PeerID{"x", "a"}, "a"},
		{"two members: the first listed", []mesh.PeerID{"b", "c"}, "b"},
		{"prefix of a member is not it", []mesh.PeerID{"a2", "ab"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f inflight
			ctx := f.begin(context.Background(), ring)
			f.abortIfMember(c.dead)
			var dead *deadMemberError
			switch {
			case c.want == "" && ctx.Err() != nil:
				t.Fatalf("aborted: %v", context.Cause(ctx))
			case c.want == "":
			case !errors.As(context.Cause(ctx), &dead):
				t.Fatalf("cause %v, want a *deadMemberError", context.Cause(ctx))
			case dead.peer != c.want:
				t.Fatalf("cause names %s, want %s", dead.peer, c.want)
			case !errors.Is(ctx.Err(), context.Canceled):
				t.Fatalf("ctx.Err() = %v, want Canceled", ctx.Err())
			}
			f.end()
		})
	}
}

// TestInflightEndClears pins end: the attempt's context ends with a nil
// cause (not a death), and a later death aborts nothing.
func TestInflightEndClears(t *testing.T) {
	var f inflight
	ring := &mesh.Ring{Members: []mesh.PeerID{"a", "b"}}
	ctx := f.begin(context.Background(), ring)
	f.end()
	if ctx.Err() == nil {
		t.Fatal("end left the attempt's context running")
	}
	var dead *deadMemberError
	if errors.As(context.Cause(ctx), &dead) {
		t.Fatalf("end's cause is a death: %v", context.Cause(ctx))
	}
	f.abortIfMember([]mesh.PeerID{"a"}) // nothing in flight: no panic, no effect
	if f.ring != nil || f.cancel != nil {
		t.Fatal("end did not clear the attempt")
	}
	f.end() // twice is harmless
}

// TestInflightAbortKeepsFirstCause pins that an attempt aborted once keeps
// the first member declared dead as its cause.
func TestInflightAbortKeepsFirstCause(t *testing.T) {
	var f inflight
	ctx := f.begin(context.Background(), &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}})
	f.abortIfMember([]mesh.PeerID{"c"})
	f.abortIfMember([]mesh.PeerID{"a"})
	f.end()
	var dead *deadMemberError
	if !errors.As(context.Cause(ctx), &dead) || dead.peer != "c" {
		t.Fatalf("cause %v, want c dead", context.Cause(ctx))
	}
	if !strings.Contains(dead.Error(), "c") {
		t.Fatalf("error %q does not name the member", dead.Error())
	}
}

// TestInflightNewAttemptUnaffected pins that a death aborting one attempt
// leaves the next attempt (another ring, after end) running.
func TestInflightNewAttemptUnaffected(t *testing.T) {
	var f inflight
	ctx1 := f.begin(context.Background(), &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}})
	f.abortIfMember([]mesh.PeerID{"b"})
	f.end()
	ctx2 := f.begin(context.Background(), &mesh.Ring{Members: []mesh.PeerID{"a", "c"}})
	f.abortIfMember([]mesh.PeerID{"b"})
	if ctx1.Err() == nil || ctx2.Err() != nil {
		t.Fatalf("first attempt err %v, second %v: want aborted, running", ctx1.Err(), ctx2.Err())
	}
	f.end()
}

// TestInflightParentCancel pins that the attempt's context ends with its
// parent (the outer loop's), whatever the mesh does.
func TestInflightParentCancel(t *testing.T) {
	var f inflight
	parent, cancel := context.WithCancel(context.Background())
	ctx := f.begin(parent, &mesh.Ring{Members: []mesh.PeerID{"a"}})
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("ctx.Err() = %v after the parent ended", ctx.Err())
	}
	f.end()
}

// TestInflightConcurrent pins that the mesh goroutine may abort while the
// training goroutine begins and ends attempts (run with -race).
func TestInflightConcurrent(t *testing.T) {
	var f inflight
	ring := &mesh.Ring{Members: []mesh.PeerID{"a", "b", "c"}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 500 {
			f.abortIfMember([]mesh.PeerID{"b"})
		}
	})
	for range 500 {
		ctx := f.begin(context.Background(), ring)
		f.end()
		if ctx.Err() == nil {
			t.Fatal("end left an attempt's context running")
		}
	}
	wg.Wait()
}
