package p2p

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
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
)

// Rendezvous returns the DHT namespace under which the nodes of a run
// advertise themselves. Routing discovery turns it into the CID of its
// SHA-256, so the DHT key is CID(sha256("intellect/<run>")).
func Rendezvous(run string) string { return "intellect/" + run }

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
		dht.BootstrapPeers(h.bootstrap...),
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
// quickly while the routing table is empty (the first node of a network) and
// re-announcing every AdvertiseInterval so that the record reaches nodes that
// joined since.
func (h *Host) advertiseLoop(ctx context.Context) {
	rd := drouting.NewRoutingDiscovery(h.dht)
	ns := Rendezvous(h.cfg.Run)
	retry := advertiseFirstRetry
	for {
		wait := h.cfg.AdvertiseInterval
		if _, err := rd.Advertise(ctx, ns); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Debug("advertise failed, will retry", "retry", retry, "err", err)
			wait, retry = retry, min(2*retry, advertiseMaxRetry)
		} else {
			h.log.Debug("advertised", "rendezvous", ns)
			retry = advertiseFirstRetry
		}
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

// discoverLoop looks up the run's advertisers and connects to those it is not
// connected to. Lookups start fast and back off to DiscoveryInterval while
// nothing new turns up.
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
		if n > 0 {
			h.log.Info("connected to new run peers", "new", n, "connected", len(h.h.Network().Peers()))
			interval = discoverFirstInterval
		} else {
			interval = min(2*interval, h.cfg.DiscoveryInterval)
		}
		if !sleepCtx(ctx, interval) {
			return
		}
	}
}

// discoverOnce runs one lookup and returns the number of peers it newly
// connected to.
func (h *Host) discoverOnce(ctx context.Context) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, h.cfg.DiscoveryInterval)
	defer cancel()
	rd := drouting.NewRoutingDiscovery(h.dht)
	found, err := rd.FindPeers(lctx, Rendezvous(h.cfg.Run), discovery.Limit(discoverLimit))
	if err != nil {
		return 0, err
	}
	var (
		mu        sync.Mutex
		connected int
		wg        sync.WaitGroup
		sem       = make(chan struct{}, discoverDialers)
	)
	for ai := range found {
		if ai.ID == h.h.ID() || h.h.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := h.connectFound(lctx, ai); err != nil {
				h.log.Debug("dial discovered peer failed", "peer", ai.ID.ShortString(), "err", err)
				return
			}
			mu.Lock()
			connected++
			mu.Unlock()
		})
	}
	wg.Wait()
	return connected, nil
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
	for sleepCtx(ctx, h.cfg.PingInterval) {
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

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
