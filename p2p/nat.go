package p2p

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// NAT traversal (docs/nat.md). A member behind a home router reserves a slot
// on a public member's relay (circuit v2), so that others can reach it
// through the relay; the relayed connection is "limited": it carries only
// identify, ping and the hole-punching handshake (DCUtR), never gossip, DHT,
// all-reduce or checkpoint streams (libp2p refuses new streams on a limited
// connection unless a protocol asks for it, and ours never do). Over it the
// two members punch a direct connection; the mesh then sees the link as
// direct. Until then the node reports the link as unreachable and the ring
// avoids it (mesh.LinkUnreachable).

// Reachability settings (Config.Reachability).
const (
	// ReachAuto: decided before start from the addresses: public with an
	// Announce or a public address on a listening interface, private
	// otherwise (a home LAN, a cloud VM behind 1:1 NAT: add --announce).
	// With NATPortMap the gateway's mapping decides, through AutoNAT.
	ReachAuto = "auto"
	// ReachPublic: the host is reachable (a public member, a port forward);
	// it offers the relay and AutoNAT services.
	ReachPublic = "public"
	// ReachPrivate: the host is not reachable from outside: it reserves
	// relay slots on public members and punches direct connections.
	ReachPrivate = "private"
)

// relayHop is the protocol a relay v2 service speaks to reserving clients.
const relayHop = "/libp2p/circuit/relay/0.2.0/hop"

// relayResources bounds the relay service a public member offers: the
// relayed connections carry only handshakes (identify, DCUtR), so libp2p's
// per-circuit limits (2 min, 128 KiB each way) are ample; fewer
// reservations than the default, as a member is not a public relay.
func relayResources() relay.Resources {
	r := relay.DefaultResources()
	r.MaxReservations = 64
	r.MaxCircuits = 8
	return r
}

// natOptions returns the libp2p options of NAT traversal for h. AutoNAT v1's
// service runs only on public hosts: it holds a second, dialing host that
// libp2p does not close with the first.
func (h *Host) natOptions() []libp2p.Option {
	opts := []libp2p.Option{
		libp2p.EnableHolePunching(holepunch.WithTracer(h.punches)),
		libp2p.EnableAutoNATv2(),
		libp2p.EnableRelayService(relay.WithResources(relayResources())),
		libp2p.EnableAutoRelayWithPeerSource(h.relayCandidates,
			autorelay.WithMinCandidates(1), autorelay.WithNumRelays(2),
			autorelay.WithBootDelay(time.Second), autorelay.WithMinInterval(time.Second),
			autorelay.WithBackoff(30*time.Second)),
	}
	switch h.reach {
	case ReachPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic(), libp2p.EnableNATService())
	case ReachPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	return opts
}

// initialReachability resolves ReachAuto (see there).
func initialReachability(c Config) string {
	switch {
	case c.Reachability != ReachAuto:
		return c.Reachability
	case len(c.Announce) > 0:
		return ReachPublic
	case c.NATPortMap:
		return ReachAuto
	}
	for _, s := range c.Listen {
		for _, ip := range listenIPs(s) {
			if manet.IsPublicAddr(ipAddr(ip)) {
				return ReachPublic
			}
		}
	}
	return ReachPrivate
}

// listenIPs returns the IPs a listen multiaddr binds: its own, or every
// interface's for an unspecified one.
func listenIPs(s string) []net.IP {
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil
	}
	ip, err := manet.ToIP(m)
	if err != nil {
		return nil
	}
	if !ip.IsUnspecified() {
		return []net.IP{ip}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && (n.IP.To4() == nil) == (ip.To4() == nil) {
			out = append(out, n.IP)
		}
	}
	return out
}

// IsPublicAddr reports whether the multiaddr s is a direct address on the
// public internet (not private, loopback or relayed).
func IsPublicAddr(s string) bool {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return false
	}
	if _, relayed := addrKind(a); relayed {
		return false
	}
	return manet.IsPublicAddr(a)
}

func ipAddr(ip net.IP) ma.Multiaddr {
	m, err := manet.FromIP(ip)
	if err != nil {
		return ma.StringCast("/ip4/0.0.0.0")
	}
	return m
}

// relayCandidates is AutoRelay's peer source: connected peers that offer
// the relay service (public members of the run, as it runs only where
// AutoNAT, or the operator, says the host is public), at most num.
func (h *Host) relayCandidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	out := make(chan peer.AddrInfo, num)
	defer close(out)
	lh, _ := h.built.Load().(host.Host) // AutoRelay may ask before New has returned
	if lh == nil {
		return out
	}
	ps := lh.Peerstore()
	for _, id := range lh.Network().Peers() {
		if len(out) == num {
			break
		}
		if ok, err := ps.SupportsProtocols(id, relayHop); err != nil || len(ok) == 0 {
			continue
		}
		out <- peer.AddrInfo{ID: id, Addrs: ps.Addrs(id)}
	}
	return out
}

// Punch is the outcome of the last hole punch with a peer, either side
// having started it.
type Punch struct {
	At      time.Time     `json:"at"`
	Success bool          `json:"success"`
	Took    time.Duration `json:"took_ns"`
	Error   string        `json:"error,omitempty"`
}

// punchLog records hole-punch outcomes per peer (holepunch.EventTracer).
type punchLog struct {
	mu   sync.Mutex
	last map[peer.ID]Punch
	ok   int
	fail int
}

// Trace keeps EndHolePunch events.
func (l *punchLog) Trace(evt *holepunch.Event) {
	end, ok := evt.Evt.(*holepunch.EndHolePunchEvt)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[peer.ID]Punch)
	}
	l.last[evt.Remote] = Punch{At: time.Unix(0, evt.Timestamp), Success: end.Success, Took: end.EllapsedTime, Error: end.Error}
	if end.Success {
		l.ok++
	} else {
		l.fail++
	}
}

// get returns the last punch with id, if any.
func (l *punchLog) get(id peer.ID) (Punch, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.last[id]
	return p, ok
}

// Reachability is what the host knows of how others reach it.
type Reachability struct {
	// State is "public", "private" (behind a NAT or firewall) or "unknown"
	// (AutoNAT has not decided yet).
	State string `json:"state"`
	// PublicAddrs are this host's addresses others can dial directly, as
	// far as it knows (listening on a public interface, announced, mapped by
	// the gateway, or observed by peers); Relayed its addresses through
	// relays that hold a reservation for it.
	PublicAddrs []string `json:"public_addrs"`
	Relayed     []string `json:"relay_addrs"`
	// Punches counts the hole punches that succeeded and failed so far.
	PunchesOK     int `json:"punches_ok"`
	PunchesFailed int `json:"punches_failed"`
}

// Reachability returns this host's reachability now.
func (h *Host) Reachability() Reachability {
	r := Reachability{State: h.reachState()}
	for _, a := range h.h.Addrs() {
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
			r.Relayed = append(r.Relayed, a.String())
		} else if manet.IsPublicAddr(a) {
			r.PublicAddrs = append(r.PublicAddrs, a.String())
		}
	}
	h.punches.mu.Lock()
	r.PunchesOK, r.PunchesFailed = h.punches.ok, h.punches.fail
	h.punches.mu.Unlock()
	return r
}

func (h *Host) reachState() string {
	h.reachMu.Lock()
	defer h.reachMu.Unlock()
	switch h.reachNow {
	case network.ReachabilityPublic:
		return ReachPublic
	case network.ReachabilityPrivate:
		return ReachPrivate
	}
	return "unknown"
}

// watchAddrs follows AutoNAT's verdicts and this host's address changes:
// it logs them, and re-advertises and looks up the run's peers at once when
// the addresses change (a relay reservation or a public address appeared),
// so that others learn how to reach it without waiting for the next round.
func (h *Host) watchAddrs(ctx context.Context, sub event.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			switch ev := e.(type) {
			case event.EvtLocalReachabilityChanged:
				h.setReach(ev.Reachability)
			case event.EvtLocalAddressesUpdated:
				r := h.Reachability()
				h.log.Info("addresses changed", "reachability", r.State, "public", r.PublicAddrs, "relayed", r.Relayed)
				kick(h.kickAdvertise)
				kick(h.kickDiscover)
			}
		}
	}
}

// setReach records AutoNAT's verdict and says, once per change, what it
// means for this node.
func (h *Host) setReach(r network.Reachability) {
	h.reachMu.Lock()
	changed := h.reachNow != r
	h.reachNow = r
	h.reachMu.Unlock()
	if !changed {
		return
	}
	switch r {
	case network.ReachabilityPrivate:
		h.log.Warn("this node is not reachable from the internet (behind a NAT or firewall): it reserves relay slots on public members and punches direct connections to peers; a peer that cannot be punched (symmetric NAT on both sides) will not be its ring neighbour. A port forward with --announce makes it public")
	case network.ReachabilityPublic:
		h.log.Info("this node is reachable from the internet: it offers a relay for peers behind NATs")
	}
}

// subscribeAddrs subscribes to the events watchAddrs follows.
func (h *Host) subscribeAddrs() (event.Subscription, error) {
	sub, err := h.h.EventBus().Subscribe([]any{new(event.EvtLocalReachabilityChanged), new(event.EvtLocalAddressesUpdated)})
	if err != nil {
		return nil, fmt.Errorf("p2p: subscribe to address events: %w", err)
	}
	return sub, nil
}

// A run peer still reached only through a relay is given a new chance to
// punch a direct connection after punchRetryFirst, then after twice the
// previous wait, up to punchRetryMax: pairs that can punch do so within
// seconds of meeting, and one that cannot (symmetric NAT on both sides)
// costs a relay circuit every punchRetryMax.
const (
	punchRetryFirst = time.Second
	punchRetryMax   = 30 * time.Second
)

// punchLoop re-dials, through the relay, run peers that this host has only
// relayed connections to: go-libp2p punches once per inbound relayed
// connection and not again on the same one (and not at all while the other
// side had no public address yet), so a fresh relayed connection is a fresh
// punch. Of the two sides only the one with the smaller id re-dials.
func (h *Host) punchLoop(ctx context.Context) {
	type retry struct {
		at   time.Time
		wait time.Duration
	}
	next := map[peer.ID]retry{}
	for waitOrKick(ctx, punchRetryFirst, nil) {
		now := time.Now()
		for _, id := range h.h.Network().Peers() {
			if ctx.Err() != nil || id < h.h.ID() || !h.isRunPeer(id) {
				continue
			}
			if _, relayed := connKind(h.h.Network().ConnsToPeer(id)); !relayed {
				delete(next, id)
				continue
			}
			r, seen := next[id]
			if !seen { // met through a relay just now: give libp2p's own punch a chance
				next[id] = retry{at: now.Add(punchRetryFirst), wait: punchRetryFirst}
				continue
			}
			if now.Before(r.at) {
				continue
			}
			h.repunch(ctx, id)
			r.wait = min(2*r.wait, punchRetryMax)
			next[id] = retry{at: time.Now().Add(r.wait), wait: r.wait}
		}
		for id := range next {
			if h.h.Network().Connectedness(id) == network.NotConnected {
				delete(next, id)
			}
		}
	}
}

// repunch replaces the relayed connections to id by a new one.
func (h *Host) repunch(ctx context.Context, id peer.ID) {
	var circuits []ma.Multiaddr
	for _, c := range h.h.Network().ConnsToPeer(id) {
		if _, relayed := addrKind(c.RemoteMultiaddr()); !relayed {
			return // punched meanwhile
		}
		circuits = append(circuits, c.RemoteMultiaddr())
	}
	for _, a := range h.h.Peerstore().Addrs(id) {
		if _, relayed := addrKind(a); relayed && !slices.ContainsFunc(circuits, a.Equal) {
			circuits = append(circuits, a)
		}
	}
	h.h.Network().ClosePeer(id)
	dctx, cancel := context.WithTimeout(network.WithAllowLimitedConn(ctx, "repunch"), h.cfg.DialTimeout)
	defer cancel()
	if err := h.h.Connect(dctx, peer.AddrInfo{ID: id, Addrs: circuits}); err != nil {
		h.log.Debug("re-dial through relay failed", "peer", id.ShortString(), "err", err)
	}
}

// isRunPeer reports whether id was seen as a peer of the run.
func (h *Host) isRunPeer(id peer.ID) bool {
	h.knownMu.Lock()
	defer h.knownMu.Unlock()
	_, ok := h.known[id]
	return ok
}
