package p2p

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Traffic is a count of application bytes carried by libp2p streams (after
// the security and muxer layers remove their framing): In received, Out sent.
type Traffic struct {
	In  uint64 `json:"in"`
	Out uint64 `json:"out"`
}

// trafficCounter is one pair of monotonically increasing byte counters.
type trafficCounter struct {
	in, out atomic.Uint64
}

func (c *trafficCounter) load() Traffic {
	return Traffic{In: c.in.Load(), Out: c.out.Load()}
}

// bandwidthCounter implements metrics.Reporter with exact counters that are
// visible as soon as a stream's Read or Write returns. libp2p's own
// metrics.BandwidthCounter folds its counts in once a second from a global
// sweeper goroutine, so its totals lag and tests would have to wait for it;
// the node wants exact per-protocol totals for its "bytes vs DDP" figure.
// Rates, when wanted, are differences of totals taken by the caller.
type bandwidthCounter struct {
	total trafficCounter
	mu    sync.RWMutex
	proto map[protocol.ID]*trafficCounter
	peers map[peer.ID]*trafficCounter
}

var _ metrics.Reporter = (*bandwidthCounter)(nil)

func newBandwidthCounter() *bandwidthCounter {
	return &bandwidthCounter{
		proto: make(map[protocol.ID]*trafficCounter),
		peers: make(map[peer.ID]*trafficCounter),
	}
}

// bwCounterFor returns the counter stored under k in m, creating it on first use.
func bwCounterFor[K comparable](mu *sync.RWMutex, m map[K]*trafficCounter, k K) *trafficCounter {
	mu.RLock()
	c := m[k]
	mu.RUnlock()
	if c != nil {
		return c
	}
	mu.Lock()
	defer mu.Unlock()
	if c = m[k]; c == nil {
		c = new(trafficCounter)
		m[k] = c
	}
	return c
}

// LogSentMessage counts n bytes sent on any stream.
func (b *bandwidthCounter) LogSentMessage(n int64) { b.total.out.Add(uint64(max(n, 0))) }

// LogRecvMessage counts n bytes received on any stream.
func (b *bandwidthCounter) LogRecvMessage(n int64) { b.total.in.Add(uint64(max(n, 0))) }

// LogSentMessageStream counts n bytes sent on a stream of proto to p.
func (b *bandwidthCounter) LogSentMessageStream(n int64, proto protocol.ID, p peer.ID) {
	v := uint64(max(n, 0))
	bwCounterFor(&b.mu, b.proto, proto).out.Add(v)
	bwCounterFor(&b.mu, b.peers, p).out.Add(v)
}

// LogRecvMessageStream counts n bytes received on a stream of proto from p.
func (b *bandwidthCounter) LogRecvMessageStream(n int64, proto protocol.ID, p peer.ID) {
	v := uint64(max(n, 0))
	bwCounterFor(&b.mu, b.proto, proto).in.Add(v)
	bwCounterFor(&b.mu, b.peers, p).in.Add(v)
}

func bwStats(t Traffic) metrics.Stats {
	return metrics.Stats{TotalIn: int64(t.In), TotalOut: int64(t.Out)}
}

// GetBandwidthForPeer returns the totals exchanged with p (rates are zero).
func (b *bandwidthCounter) GetBandwidthForPeer(p peer.ID) metrics.Stats {
	return bwStats(b.peer(p))
}

// GetBandwidthForProtocol returns the totals of proto (rates are zero).
func (b *bandwidthCounter) GetBandwidthForProtocol(proto protocol.ID) metrics.Stats {
	return bwStats(b.protocol(proto))
}

// GetBandwidthTotals returns the totals over all streams (rates are zero).
func (b *bandwidthCounter) GetBandwidthTotals() metrics.Stats { return bwStats(b.total.load()) }

// GetBandwidthByPeer returns the totals per peer (rates are zero).
func (b *bandwidthCounter) GetBandwidthByPeer() map[peer.ID]metrics.Stats {
	out := make(map[peer.ID]metrics.Stats)
	for p, t := range bwSnapshot(&b.mu, b.peers) {
		out[p] = bwStats(t)
	}
	return out
}

// GetBandwidthByProtocol returns the totals per protocol (rates are zero).
func (b *bandwidthCounter) GetBandwidthByProtocol() map[protocol.ID]metrics.Stats {
	out := make(map[protocol.ID]metrics.Stats)
	for p, t := range bwSnapshot(&b.mu, b.proto) {
		out[p] = bwStats(t)
	}
	return out
}

// Reset is a no-op: the counters are monotonic so that concurrent readers
// computing differences never see them go backwards.
func (b *bandwidthCounter) Reset() {}

// TrimIdle is a no-op: a node talks to a bounded set of run peers and
// protocols, so the maps stay small.
func (b *bandwidthCounter) TrimIdle(time.Time) {}

func (b *bandwidthCounter) peer(p peer.ID) Traffic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if c := b.peers[p]; c != nil {
		return c.load()
	}
	return Traffic{}
}

func (b *bandwidthCounter) protocol(proto protocol.ID) Traffic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if c := b.proto[proto]; c != nil {
		return c.load()
	}
	return Traffic{}
}

func bwSnapshot[K comparable](mu *sync.RWMutex, m map[K]*trafficCounter) map[K]Traffic {
	mu.RLock()
	defer mu.RUnlock()
	out := make(map[K]Traffic, len(m))
	for k, c := range m {
		out[k] = c.load()
	}
	return out
}

// Bandwidth returns the bytes sent and received per stream protocol since the
// host was created. Bytes read or written before a stream's protocol was
// negotiated are counted under the empty protocol ID.
func (h *Host) Bandwidth() map[protocol.ID]Traffic { return bwSnapshot(&h.bw.mu, h.bw.proto) }

// TotalBandwidth returns the bytes sent and received on all streams.
func (h *Host) TotalBandwidth() Traffic { return h.bw.total.load() }

// PeerBandwidth returns the bytes exchanged with one peer on all streams.
func (h *Host) PeerBandwidth(id peer.ID) Traffic { return h.bw.peer(id) }
