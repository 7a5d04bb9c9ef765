package node

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh"
)

// heardEvery is how often, in mesh ticks, the mesh loop looks for peers
// that sent bytes (a heartbeat's period: DeadTicks is six of them).
const heardEvery = mesh.DefaultHeartbeatTicks

// heardFeed tells the mesh's failure detector about peers whose bytes
// arrived on any stream (mesh.Heard): during an all-reduce that fills a
// slow uplink, a member's heartbeats wait behind its data, and the data
// is what shows it is alive.
type heardFeed struct {
	ticks int
	last  map[peer.ID]heardPeer
}

type heardPeer struct {
	id       mesh.PeerID
	received uint64
}

// tick is called at every mesh tick; every heardEvery ticks it calls heard
// with each connected peer whose received bytes grew since the last look.
func (f *heardFeed) tick(peers func() []peer.ID, received func(peer.ID) uint64, heard func(mesh.PeerID)) {
	if f.ticks++; f.ticks%heardEvery != 0 {
		return
	}
	ps := peers()
	next := make(map[peer.ID]heardPeer, len(ps))
	for _, p := range ps {
		h, ok := f.last[p]
		if !ok {
			h.id = mesh.PeerID(p.String())
		}
		if got := received(p); got != h.received {
			h.received = got
			if ok {
				heard(h.id)
			}
		}
		next[p] = h
	}
	f.last = next
}
