package p2p

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// DHTProtocolPrefix keeps the run's DHT apart from the public IPFS (Amino)
// DHT: our nodes speak "/intellect/kad/1.0.0" and never join the public one.
const DHTProtocolPrefix = "/intellect"

const (
	// discoverFirstInterval is the pause after the first lookups; it doubles
	// up to Config.DiscoveryInterval, and drops back when new peers appear.
	discoverFirstInterval = 100 * time.Millisecond
	// advertiseFirstRetry is the first pause after a failed advertisement
	// (typically: routing table still empty); it doubles up to one minute.
	advertiseFirstRetry = 250 * time.Millisecond
	advertiseMaxRetry   = time.Minute
	// discoverLimit caps the providers taken from one lookup.
	discoverLimit = 1024
	// discoverDialers bounds concurrent dials in one discovery round.
	discoverDialers = 8
	// maxKnownPeers bounds the remembered run peers used to rejoin.
	maxKnownPeers = 256
)

// Rendezvous returns the DHT namespace under which the nodes of a run
// advertise themselves: "intellect/<run>/<id>" for the run manifest id,
// "intellect/<run>" when id is empty. Routing discovery turns it into the
// CID of its SHA-256.
func Rendezvous(run, id string) string { return "intellect/" + runKey(run, id) }

// buildDHT creates the Kademlia DHT in server mode, so that every node,
// including one on a loopback or private address, answers queries and can
// bootstrap the next. No address filter is set: private and loopback
// addresses are kept (one DHT for LAN and WAN, unlike the dual DHT of IPFS
// which splits them), since runs often live on one LAN or one machine.
func (h *Host) buildDHT() error {
	d, err := dht.New(h.h,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix(DHTProtocolPrefix),
		dht.DisableValues(),
		dht.BootstrapPeersFunc(h.rejoinCandidates),
	)
	if err != nil {
		return fmt.Errorf("p2p: start dht: %w", err)
	}
	h.dht = d
	return nil
}

// RoutingTableSize returns the number of peers in the DHT routing table.
func (h *Host) RoutingTableSize() int { return h.dht.RoutingTable().Size() }

// advertiseLoop announces this host under the run's rendezvous key, retrying
// quickly while the routing table is empty (the first node of a network: a
// newly identified neighbour retries at once) and re-announcing every
// AdvertiseInterval so that the record reaches nodes that joined since.
func (h *Host) advertiseLoop(ctx context.Context) {
	rd := drouting.NewRoutingDiscovery(h.dht)
	ns := Rendezvous(h.cfg.Run, h.cfg.RunID)
	retry := advertiseFirstRetry
	for {
		if _, err := rd.Advertise(ctx, ns); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Debug("advertise failed, will retry", "retry", retry, "err", err)
			if !waitOrKick(ctx, retry, h.kickAdvertise) {
				return
			}
			// While connected peers are still being identified into the
			// routing table, keep the first pace; otherwise back off.
			if h.RoutingTableSize() > 0 || len(h.h.Network().Peers()) == 0 {
				retry = min(2*retry, advertiseMaxRetry)
			}
			continue
		}
		h.log.Debug("advertised", "rendezvous", ns)
		retry = advertiseFirstRetry
		if !waitOrKick(ctx, h.cfg.AdvertiseInterval, nil) {
			return
		}
	}
}

// discoverLoop looks up the run's advertisers and connects to those it is not
// connected to. Lookups start fast and back off to DiscoveryInterval while
// nothing new turns up; a newly identified peer of our DHT resets the pace.
func (h *Host) discoverLoop(ctx context.Context) {
	interval := discoverFirstInterval
	for {
		n, err := h.discoverOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			h.log.Debug("discovery lookup failed", "err", err)
		}
		switch {
		case n > 0:
			h.log.Info("connected to new run peers", "new", n, "connected", len(h.h.Network().Peers()))
			interval = discoverFirstInterval
		case h.RoutingTableSize() == 0 && len(h.h.Network().Peers()) > 0:
			// Connected, but identify has not filled the routing table
			// yet: a lookup cannot run, so do not back off.
			interval = discoverFirstInterval
		default:
			interval = min(2*interval, h.cfg.DiscoveryInterval)
		}
		h.savePeerBook(false)
		if !waitOrKick(ctx, interval, h.kickDiscover) {
			return
		}
	}
}

// watchPeers turns identify events into work: a peer that speaks our DHT is
// remembered for rejoin, and it wakes the advertise and discovery loops,
// since a routing table that just grew can serve both.
func (h *Host) watchPeers(ctx context.Context, sub event.Subscription) {
	defer sub.Close()
	proto := protocol.ID(DHTProtocolPrefix + "/kad/1.0.0")
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			ev, ok := e.(event.EvtPeerIdentificationCompleted)
			if !ok || !slices.Contains(ev.Protocols, proto) {
				continue
			}
			h.remember(ev.Peer)
			kick(h.kickAdvertise)
			kick(h.kickDiscover)
		}
	}
}

// kick wakes a loop waiting in waitOrKick without ever blocking.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// waitOrKick waits d, or until a kick on c (nil: never), or until ctx is
// done; it reports false only in the last case.
func waitOrKick(ctx context.Context, d time.Duration, c chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c:
		return true
	case <-ctx.Done():
		return false
	}
}

// discoverOnce runs one lookup and returns the number of peers it newly
// connected to. A host that has lost every connection first redials the run
// peers it knew and its bootstrap peers, since a lookup needs a neighbour.
// A host connected to none of its bootstrap peers redials them too: peers
// that could not reach the bootstrap node when they started may have found
// each other, and a lookup among them finds only them.
func (h *Host) discoverOnce(ctx context.Context) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, h.cfg.DiscoveryInterval)
	defer cancel()
	if len(h.h.Network().Peers()) == 0 {
		return h.rejoin(lctx), nil
	}
	var boot int
	var wg sync.WaitGroup
	if !h.bootstrapConnected() { // beside the lookup: an unreachable one may take DialTimeout
		wg.Go(func() { boot = h.dialAll(lctx, slices.Values(h.bootstrap)) })
	}
	defer wg.Wait()
	rd := drouting.NewRoutingDiscovery(h.dht)
	found, err := rd.FindPeers(lctx, Rendezvous(h.cfg.Run, h.cfg.RunID), discovery.Limit(discoverLimit))
	if err != nil {
		return 0, err
	}
	n := h.dialAll(lctx, func(yield func(peer.AddrInfo) bool) {
		for ai := range found {
			if !yield(ai) {
				return
			}
		}
	})
	wg.Wait()
	return n + boot, nil
}

// bootstrapConnected reports whether the host is connected to one of its
// bootstrap peers, or has none.
func (h *Host) bootstrapConnected() bool {
	for _, ai := range h.bootstrap {
		if h.h.Network().Connectedness(ai.ID) == network.Connected {
			return true
		}
	}
	return len(h.bootstrap) == 0
}

// dialAll connects, a few at a time, to the peers it is not connected to
// yet, and returns how many new connections it made.
func (h *Host) dialAll(ctx context.Context, peers iter.Seq[peer.AddrInfo]) int {
	var (
		connected atomic.Int64
		wg        sync.WaitGroup
		sem       = make(chan struct{}, discoverDialers)
	)
	for ai := range peers {
		if ai.ID == h.h.ID() || h.h.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := h.connectFound(ctx, ai); err != nil {
				h.log.Debug("dial run peer failed", "peer", ai.ID.ShortString(), "err", err)
				return
			}
			connected.Add(1)
		})
	}
	wg.Wait()
	return int(connected.Load())
}

// rejoin dials every rejoin candidate and returns how many answered.
func (h *Host) rejoin(ctx context.Context) int {
	cands := h.rejoinCandidates()
	if len(cands) == 0 {
		return 0
	}
	h.log.Warn("no connections left: redialing known run peers", "candidates", len(cands))
	return h.dialAll(ctx, slices.Values(cands))
}

// rejoinCandidates returns the configured bootstrap peers and the run peers
// this host has been connected to, in this process or before a restart
// (PeerBookFile), so that losing the bootstrap node, or every connection
// for a while, does not strand a node. It also serves the DHT, which
// redials them when its routing table empties.
func (h *Host) rejoinCandidates() []peer.AddrInfo {
	h.knownMu.Lock()
	defer h.knownMu.Unlock()
	out := slices.Clone(h.bootstrap)
	for id, k := range h.known {
		if !slices.ContainsFunc(h.bootstrap, func(b peer.AddrInfo) bool { return b.ID == id }) {
			out = append(out, k.ai)
		}
	}
	return out
}

// remember records a run peer's addresses for rejoin, evicting the entry
// seen longest ago when full.
func (h *Host) remember(id peer.ID) {
	addrs := h.h.Peerstore().Addrs(id)
	if len(addrs) == 0 {
		return
	}
	h.knownMu.Lock()
	defer h.knownMu.Unlock()
	if _, ok := h.known[id]; !ok && len(h.known) >= maxKnownPeers {
		var oldest peer.ID
		for k, p := range h.known {
			if oldest == "" || p.seen.Before(h.known[oldest].seen) {
				oldest = k
			}
		}
		delete(h.known, oldest)
	}
	h.known[id] = knownPeer{ai: peer.AddrInfo{ID: id, Addrs: addrs}, seen: time.Now()}
	h.knownDirty = true
}

// connectFound dials a discovered peer, resolving its addresses through the
// DHT when the provider record came without them.
func (h *Host) connectFound(ctx context.Context, ai peer.AddrInfo) error {
	if len(ai.Addrs) == 0 && len(h.h.Peerstore().Addrs(ai.ID)) == 0 {
		fctx, cancel := context.WithTimeout(ctx, h.cfg.DialTimeout)
		resolved, err := h.dht.FindPeer(fctx, ai.ID)
		cancel()
		if err != nil {
			return fmt.Errorf("p2p: resolve %s: %w", ai.ID.ShortString(), err)
		}
		ai = resolved
	}
	return h.connect(ctx, ai)
}

// pingLoop pings every connected peer each PingInterval; libp2p's ping
// records the round trip in the peerstore's latency EWMA read by PeerInfo.
func (h *Host) pingLoop(ctx context.Context) {
	for waitOrKick(ctx, h.cfg.PingInterval, nil) {
		h.pingAll(ctx)
	}
}

func (h *Host) pingAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PingInterval)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range h.h.Network().Peers() {
		wg.Go(func() {
			res, ok := <-ping.Ping(ctx, h.h, id)
			if ok && res.Error != nil && !errors.Is(res.Error, context.Canceled) {
				h.log.Debug("ping failed", "peer", id.ShortString(), "err", res.Error)
			}
		})
	}
	wg.Wait()
}
