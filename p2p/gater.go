package p2p

import (
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// gater refuses connections to and from peers excluded from the run (Block)
// or refused admission (for a while, Host.SetAdmission): a libp2p
// connection gater, consulted before dialing and once the remote peer's
// identity is known.
type gater struct {
	mu      sync.Mutex
	blocked map[peer.ID]string    // peer → the evidence it was excluded on
	refused map[peer.ID]time.Time // peer not admitted to the run → refused until
}

func (g *gater) isBlocked(p peer.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.blocked[p]; ok {
		return true
	}
	until, ok := g.refused[p]
	if ok && !time.Now().Before(until) {
		delete(g.refused, p)
		return false
	}
	return ok
}

// refuse refuses p's connections until the given time (admission, see
// Host.SetAdmission). Refusals that ran out are dropped as it goes, so the
// map holds at most the peers refused within AdmitRefuseFor.
func (g *gater) refuse(p peer.ID, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refused == nil {
		g.refused = make(map[peer.ID]time.Time)
	}
	now := time.Now()
	for q, u := range g.refused {
		if !now.Before(u) {
			delete(g.refused, q)
		}
	}
	g.refused[p] = until
}

// InterceptPeerDial refuses to dial a blocked peer.
func (g *gater) InterceptPeerDial(p peer.ID) bool { return !g.isBlocked(p) }

// InterceptAddrDial refuses to dial a blocked peer at any address.
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.isBlocked(p) }

// InterceptAccept lets every inbound connection reach the handshake.
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses a blocked peer once its identity is proven.
func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.isBlocked(p)
}

// InterceptUpgraded allows every connection that got this far.
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// Excluded is one peer excluded from the run and why.
type Excluded struct {
	ID       peer.ID `json:"id"`
	Evidence string  `json:"evidence"`
}

// Block excludes id from this node's view of the run for good: its
// connections are closed, new ones refused (connection gater), and gossip
// it authored or relays is dropped (pubsub's blacklist), so the mesh soon
// counts it gone. evidence says why, for the log and Excluded. It returns
// false if id was blocked already.
func (h *Host) Block(id peer.ID, evidence string) bool {
	h.gate.mu.Lock()
	if _, ok := h.gate.blocked[id]; ok {
		h.gate.mu.Unlock()
		return false
	}
	h.gate.blocked[id] = evidence
	h.gate.mu.Unlock()
	if ps := h.gossip.ps; ps != nil {
		ps.BlacklistPeer(id)
	}
	h.h.Network().ClosePeer(id)
	h.log.Warn("peer excluded from the run", "peer", id, "evidence", evidence)
	return true
}

// Excluded lists the peers Block excluded, by id.
func (h *Host) Excluded() []Excluded {
	h.gate.mu.Lock()
	defer h.gate.mu.Unlock()
	out := make([]Excluded, 0, len(h.gate.blocked))
	for id, ev := range h.gate.blocked {
		out = append(out, Excluded{ID: id, Evidence: ev})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
