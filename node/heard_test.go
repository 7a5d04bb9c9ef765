package node

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh"
)

// TestHeardFeed: every heardEvery ticks the feed names the connected peers
// whose received bytes grew since its last look — not a peer seen for the
// first time, not one whose count stood still, not one that disconnected.
func TestHeardFeed(t *testing.T) {
	a, b, c := peer.ID("a"), peer.ID("b"), peer.ID("c")
	recv := map[peer.ID]uint64{a: 10, b: 10}
	conns := []peer.ID{a, b}
	var f heardFeed
	look := func() []mesh.PeerID {
		var got []mesh.PeerID
		for range heardEvery {
			f.tick(func() []peer.ID { return conns }, func(p peer.ID) uint64 { return recv[p] },
				func(id mesh.PeerID) { got = append(got, id) })
		}
		slices.Sort(got)
		return got
	}
	if got := look(); len(got) != 0 {
		t.Fatalf("first look: %v", got)
	}
	recv[a] += 5
	if got := look(); !slices.Equal(got, []mesh.PeerID{mesh.PeerID(a.String())}) {
		t.Fatalf("a grew: %v", got)
	}
	recv[a]++
	recv[b]++
	conns = []peer.ID{b, c}
	recv[c] = 7
	if got := look(); !slices.Equal(got, []mesh.PeerID{mesh.PeerID(b.String())}) {
		t.Fatalf("a gone, b grew, c new: %v", got)
	}
	var calls int
	for range heardEvery - 1 {
		recv[b]++
		f.tick(func() []peer.ID { calls++; return conns }, func(p peer.ID) uint64 { return recv[p] }, func(mesh.PeerID) {})
	}
	if calls != 0 {
		t.Errorf("peers listed %d times between looks", calls)
	}
}
