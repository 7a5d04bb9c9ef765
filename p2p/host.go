package p2p

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	yamux "github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	swarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
	noise "github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultPort is the TCP port a node listens on when Config.Listen is empty:
// the port the README documents (node.DefaultPort names this one).
const DefaultPort = 4001

// DefaultListen are the listen addresses used when Config.Listen is empty:
// every IPv4 and IPv6 interface on DefaultPort. Listening succeeds if at least
// one of them can be bound.
var DefaultListen = []string{
	fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", DefaultPort),
	fmt.Sprintf("/ip6/::/tcp/%d", DefaultPort),
	fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", DefaultPort),
	fmt.Sprintf("/ip6/::/udp/%d/quic-v1", DefaultPort),
}

// DefaultRun is the run name used when Config.Run is empty.
const DefaultRun = "default"

// PSKSize is the length in bytes of a private-network pre-shared key.
const PSKSize = 32

// maxRunName bounds Config.Run; it appears in topic names and DHT keys.
const maxRunName = 64

var runNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

var (
	// ErrInvalidConfig is wrapped by every error Config.Validate returns.
	ErrInvalidConfig = errors.New("p2p: invalid config")
	// ErrNotStarted is returned by methods that need Start to have run.
	ErrNotStarted = errors.New("p2p: host not started")
	// ErrAlreadyStarted is returned by a second call to Start.
	ErrAlreadyStarted = errors.New("p2p: host already started")
	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("p2p: host closed")
	// ErrBootstrapFailed is returned by Start when bootstrap peers were given
	// and none of them could be reached.
	ErrBootstrapFailed = errors.New("p2p: no bootstrap peer reachable")
)

// Config configures a Host. The zero value plus a Home is valid for real use;
// Validate fills the defaults.
type Config struct {
	// Home is the directory holding the identity key (IdentityFile). Empty
	// means a fresh in-memory identity on every start, for tests.
	Home string
	// Listen lists the multiaddrs to listen on (TCP and QUIC v1). Default DefaultListen.
	// Tests use "/ip4/127.0.0.1/tcp/0".
	Listen []string
	// Announce, if set, replaces the addresses this host advertises to others
	// (for a node behind a port forward: "/ip4/<public ip>/tcp/<port>").
	Announce []string
	// Bootstrap lists full multiaddrs, with /p2p/<id>, of nodes of the run.
	// Empty starts a new network. Any node of the run can serve as bootstrap.
	Bootstrap []string
	// Rejoin marks a node that already belongs to the run (restarted with
	// its home): Start does not fail when no bootstrap peer answers, it logs
	// a warning and the discovery loop keeps redialing them, so that a
	// member restarted while its network is cut comes back when it heals.
	Rejoin bool
	// Run names the training run; it selects the gossip topics and the DHT
	// rendezvous key. Letters, digits, '.', '_', '-'; at most 64 bytes.
	// Default DefaultRun.
	Run string
	// RunID is the run manifest's id (64 lower-case hex digits); with Run it
	// names the gossip topic and the DHT rendezvous key, so runs with the
	// same name but other manifests never meet. Empty (tests): the name
	// alone. SetRun sets it after New, before Start.
	RunID string
	// PSK, if non-nil, is a 32-byte pre-shared key: the host then only talks
	// to hosts with the same key (libp2p private network).
	PSK []byte
	// Topics names the run's gossip topics besides MeshTopic, each under
	// the run's key (TopicOf): a name and a version such as "account/1",
	// of [a-z0-9./-], at most maxTopicName bytes, at most maxTopics of
	// them. Start joins them all; messages on them arrive on Messages
	// with their Topic, PublishTo sends and SetTopicValidator vets them.
	Topics []string
	// Logger receives the host's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics, if set, receives libp2p's own Prometheus metrics (swarm,
	// identify, resource manager); nil disables them.
	Metrics prometheus.Registerer

	// ConnsLow and ConnsHigh are the connection manager's water marks: above
	// High it trims connections down to Low, sparing protected (ring) peers
	// and preferring to keep peers of the run. Default 96 and 192.
	ConnsLow, ConnsHigh int
	// DialTimeout bounds one attempt to connect to a peer. Default 10 s.
	DialTimeout time.Duration
	// DiscoveryInterval is the longest pause between two DHT lookups of the
	// run's peers; lookups start every 100 ms and back off to it. Default 10 s.
	DiscoveryInterval time.Duration
	// AdvertiseInterval is how often the host re-announces itself under the
	// run's rendezvous key, so that records reach nodes that joined later.
	// Default 2 min.
	AdvertiseInterval time.Duration
	// PingInterval is how often connected run peers are pinged to keep
	// their latency estimate fresh. Default 10 s.
	PingInterval time.Duration
	// GossipHeartbeat is gossipsub's heartbeat, which (re)builds the topic's
	// mesh. Default 700 ms; tests use 50–100 ms for fast mesh formation.
	GossipHeartbeat time.Duration
	// GossipMaxSize is the largest payload Publish accepts and receivers
	// deliver, in bytes. Default 64 KiB, at most 1 MiB.
	GossipMaxSize int
	// MessageBuffer is the capacity of the channel returned by Messages.
	// When it is full, newer messages are dropped and counted. Default 1024.
	MessageBuffer int
	// GossipRate is the sustained rate of topic messages, per second, that
	// one author may send; GossipBurst how many it may send at once. Over
	// the rate its messages are ignored (not delivered, not relayed), and
	// over it by another burst rejected (a gossip score penalty). Default
	// 200/s and 400: the fastest honest author measured, a sim-device node
	// of the node tests, peaks at 66 messages in a second.
	GossipRate  float64
	GossipBurst int
	// NATPortMap asks the gateway for a port mapping by UPnP / NAT-PMP.
	NATPortMap bool
	// Reachability is ReachAuto (the default), ReachPublic or ReachPrivate:
	// see those and docs/nat.md.
	Reachability string
	// Libp2p, if set, builds the libp2p host in place of the TCP and QUIC
	// transports (Listen, Announce, PSK and the NAT options then do not
	// apply): go-libp2p's mock network, many nodes in one process.
	Libp2p Libp2pFunc
}

// Validate fills defaults and rejects bad values. It does not touch the disk.
func (c *Config) Validate() error {
	if len(c.Listen) == 0 {
		c.Listen = append([]string(nil), DefaultListen...)
	}
	if c.Run == "" {
		c.Run = DefaultRun
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	setDefault(&c.ConnsLow, 96)
	setDefault(&c.ConnsHigh, 192)
	setDefault(&c.DialTimeout, 10*time.Second)
	setDefault(&c.DiscoveryInterval, 10*time.Second)
	setDefault(&c.AdvertiseInterval, 2*time.Minute)
	setDefault(&c.PingInterval, 10*time.Second)
	setDefault(&c.GossipHeartbeat, 700*time.Millisecond)
	setDefault(&c.GossipMaxSize, 64<<10)
	setDefault(&c.MessageBuffer, 1024)
	setDefault(&c.GossipRate, 200)
	setDefault(&c.GossipBurst, 400)
	return c.check()
}

func setDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

func (c *Config) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if len(c.Run) > maxRunName || !runNamePattern.MatchString(c.Run) {
		return bad("run name %q: want 1-%d of [A-Za-z0-9._-], starting with a letter or digit", c.Run, maxRunName)
	}
	if err := checkRunID(c.RunID); err != nil {
		return bad("%v", err)
	}
	if c.PSK != nil && len(c.PSK) != PSKSize {
		return bad("PSK is %d bytes, want %d", len(c.PSK), PSKSize)
	}
	if c.ConnsLow < 1 || c.ConnsHigh < c.ConnsLow {
		return bad("connection water marks low=%d high=%d", c.ConnsLow, c.ConnsHigh)
	}
	if c.GossipMaxSize < 1 || c.GossipMaxSize > 1<<20 {
		return bad("gossip max size %d: want 1..%d bytes", c.GossipMaxSize, 1<<20)
	}
	for _, d := range []time.Duration{c.DialTimeout, c.DiscoveryInterval, c.AdvertiseInterval, c.PingInterval, c.GossipHeartbeat} {
		if d < time.Millisecond {
			return bad("interval %v below 1ms", d)
		}
	}
	if c.Reachability == "" {
		c.Reachability = ReachAuto
	}
	if c.Reachability != ReachAuto && c.Reachability != ReachPublic && c.Reachability != ReachPrivate {
		return bad("reachability %q: want auto, public or private", c.Reachability)
	}
	if c.MessageBuffer < 1 {
		return bad("message buffer %d", c.MessageBuffer)
	}
	if !(c.GossipRate > 0) || math.IsInf(c.GossipRate, 0) || c.GossipBurst < 1 {
		return bad("gossip rate %v/s, burst %d: want > 0 and ≥ 1", c.GossipRate, c.GossipBurst)
	}
	for _, s := range append(append([]string(nil), c.Listen...), c.Announce...) {
		if _, err := ma.NewMultiaddr(s); err != nil {
			return bad("address %q: %v", s, err)
		}
	}
	if _, err := parseBootstrap(c.Bootstrap); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := checkTopics(c.Topics); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// parseBootstrap turns full multiaddrs into peer infos, merging addresses of
// the same peer.
func parseBootstrap(addrs []string) ([]peer.AddrInfo, error) {
	var mas []ma.Multiaddr
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("bootstrap %q: %w", s, err)
		}
		mas = append(mas, m)
	}
	infos, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil, fmt.Errorf("bootstrap addresses must end in /p2p/<peer id>: %w", err)
	}
	return infos, nil
}

// Host is one node's libp2p endpoint: identity, TCP+TLS/Noise+yamux and
// QUIC v1 transports, resource and connection managers, the Kademlia DHT
// used for discovery, and the run's gossipsub topics. Its methods are safe
// for concurrent use.
type Host struct {
	cfg       Config
	log       *slog.Logger
	h         host.Host
	dht       *dht.IpfsDHT
	cm        *connmgr.BasicConnMgr
	bw        *bandwidthCounter
	bootstrap []peer.AddrInfo

	kickAdvertise chan struct{} // a new neighbour: retry a failed advertisement now
	kickDiscover  chan struct{} // a new neighbour: look up the run's peers now

	knownMu    sync.Mutex
	known      map[peer.ID]knownPeer // run peers seen, for rejoin (and PeerBookFile)
	knownDirty bool                  // known changed since the book was written
	knownSaved time.Time             // when the book was last written

	reach    string       // Config.Reachability resolved before start (initialReachability)
	punches  *punchLog    // hole-punch outcomes per peer
	gate     *gater       // peers excluded from the run (Block)
	built    atomic.Value // the libp2p host once libp2p.New returned, for its own callbacks
	reachMu  sync.Mutex
	reachNow network.Reachability // AutoNAT's (or the forced) verdict

	// reached: a bootstrap peer answered Dial before Start, so the run
	// exists and this node is joining it; Start then treats a failed
	// redial of the bootstrap peers like Config.Rejoin.
	reached atomic.Bool

	gossip gossipState
	msgs   chan Message
	admit  atomic.Pointer[admitState] // nil: everyone is admitted (SetAdmission)

	// life bounds the host's background work that does not wait for Start
	// (admission); Close cancels it.
	life     context.Context
	stopLife context.CancelFunc

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New creates the host: it loads or creates the identity under cfg.Home,
// starts listening and serves the DHT, but dials nobody until Start. ctx
// bounds construction only.
func New(ctx context.Context, cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key, err := hostIdentity(cfg)
	if err != nil {
		return nil, err
	}
	boot, _ := parseBootstrap(cfg.Bootstrap) // checked by Validate
	h := &Host{
		cfg:       cfg,
		bw:        newBandwidthCounter(),
		bootstrap: boot,
		known:     make(map[peer.ID]knownPeer),
		reach:     initialReachability(cfg),
		punches:   &punchLog{},
		gate:      &gater{blocked: make(map[peer.ID]string)},

		kickAdvertise: make(chan struct{}, 1),
		kickDiscover:  make(chan struct{}, 1),
		msgs:          make(chan Message, cfg.MessageBuffer),
	}
	h.gossip.rate = newAuthorRate(cfg.GossipRate, cfg.GossipBurst, time.Now)
	h.gossip.topics = newGossipTopics(cfg.Topics)
	h.life, h.stopLife = context.WithCancel(context.Background())
	DoPart(ctx, PartHost, func(context.Context) { err = h.buildLibp2p(key) })
	if err != nil {
		h.stopLife()
		return nil, err
	}
	h.log = cfg.Logger.With("system", "p2p", "self", h.h.ID().ShortString())
	switch h.reach {
	case ReachPublic:
		h.reachNow = network.ReachabilityPublic
	case ReachPrivate:
		h.reachNow = network.ReachabilityPrivate
	}
	DoPart(ctx, PartDHT, func(context.Context) { err = h.buildDHT() })
	if err != nil {
		h.stopLife()
		h.h.Close()
		return nil, err
	}
	h.loadPeerBook()
	h.log.Info("host listening", "id", h.h.ID().String(), "addrs", h.Addrs(), "run", cfg.Run)
	return h, nil
}

// hostIdentity loads the persistent key, or makes an ephemeral one when no
// home directory is configured.
func hostIdentity(cfg Config) (crypto.PrivKey, error) {
	if cfg.Home == "" {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		return key, err
	}
	key, created, err := LoadOrCreateIdentity(cfg.Home)
	if err != nil {
		return nil, err
	}
	if created {
		cfg.Logger.Info("created node identity", "system", "p2p", "home", cfg.Home)
	}
	return key, nil
}

// buildLibp2p assembles the libp2p host. Two transports: TCP, where TLS is
// listed before Noise so that TLS (1.4x the throughput of Noise here) wins
// the security negotiation between two of our nodes and Noise remains for
// peers without TLS; and QUIC v1 beside it (a second path through NATs),
// except in a private network, since pnet does not support QUIC.
func (h *Host) buildLibp2p(key crypto.PrivKey) error {
	cm, err := connmgr.NewConnManager(h.cfg.ConnsLow, h.cfg.ConnsHigh, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		return fmt.Errorf("p2p: connection manager: %w", err)
	}
	if h.cfg.Libp2p != nil {
		return h.buildOn(key, cm)
	}
	rm, err := newResourceManager(h.cfg.Metrics)
	if err != nil {
		return err
	}
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrStrings(listenable(h.cfg.Listen, h.cfg.PSK == nil)...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(admitRM{ResourceManager: rm, h: h}),
		libp2p.ConnectionManager(cm),
		libp2p.BandwidthReporter(h.bw),
		libp2p.Ping(true),
		libp2p.UserAgent("intellect-node"),
		libp2p.ConnectionGater(h.gate),
	}
	if h.cfg.Metrics != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(h.cfg.Metrics))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	if h.cfg.PSK != nil {
		opts = append(opts, libp2p.PrivateNetwork(pnet.PSK(h.cfg.PSK)))
	} else {
		opts = append(opts, libp2p.Transport(libp2pquic.NewTransport)) // QUIC has no private networks
	}
	if len(h.cfg.Announce) > 0 {
		announce := make([]ma.Multiaddr, 0, len(h.cfg.Announce))
		for _, s := range h.cfg.Announce {
			announce = append(announce, ma.StringCast(s)) // checked by Validate
		}
		opts = append(opts, libp2p.AddrsFactory(func([]ma.Multiaddr) []ma.Multiaddr { return announce }))
	}
	if h.cfg.NATPortMap {
		opts = append(opts, libp2p.NATPortMap())
	}
	opts = append(opts, h.natOptions()...)
	lh, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return fmt.Errorf("p2p: start libp2p host: %w", err)
	}
	h.h, h.cm = lh, cm
	h.built.Store(lh)
	return nil
}

// listenable drops QUIC addresses from listen unless quic (a private
// network has no QUIC), so that the defaults work with a PSK.
func listenable(listen []string, quic bool) []string {
	if quic {
		return listen
	}
	var out []string
	for _, s := range listen {
		if m, err := ma.NewMultiaddr(s); err == nil {
			if _, err := m.ValueForProtocol(ma.P_QUIC_V1); err == nil {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// newResourceManager applies libp2p's default limits scaled to this
// machine's memory and file descriptors. Loopback connections are not
// limited per IP (rcmgr's default), which local multi-node tests rely on.
// With reg, its usage and blocked resources are exported there.
func newResourceManager(reg prometheus.Registerer) (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	var opts []rcmgr.Option
	if reg != nil {
		rcmgr.MustRegisterWith(reg)
		str, err := rcmgr.NewStatsTraceReporter()
		if err != nil {
			return nil, fmt.Errorf("p2p: resource manager metrics: %w", err)
		}
		opts = append(opts, rcmgr.WithTraceReporter(str))
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()), opts...)
	if err != nil {
		return nil, fmt.Errorf("p2p: resource manager: %w", err)
	}
	return rm, nil
}

// ID returns the host's peer ID.
func (h *Host) ID() peer.ID { return h.h.ID() }

// Addrs returns the host's listen addresses as full multiaddrs ending in
// /p2p/<id>, suitable as another node's Config.Bootstrap.
func (h *Host) Addrs() []string {
	suffix := "/p2p/" + h.h.ID().String()
	addrs := h.h.Addrs()
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String()+suffix)
	}
	return out
}

// Libp2p returns the underlying libp2p host, for stream protocols written
// elsewhere in this package. Its lifetime is the Host's.
func (h *Host) Libp2p() host.Host { return h.h }

// Run returns the run name the host serves.
func (h *Host) Run() string { return h.cfg.Run }

// Protect keeps the connection manager from trimming id's connections until
// Unprotect. (An all-reduce attempt protects its neighbours by itself, under
// its own tag, while it runs.)
func (h *Host) Protect(id peer.ID) { h.cm.Protect(id, protectRingTag) }

// Unprotect undoes Protect.
func (h *Host) Unprotect(id peer.ID) { h.cm.Unprotect(id, protectRingTag) }

const (
	protectRingTag = "intellect-ring"
	runPeerTag     = "intellect-run"
	runPeerValue   = 100
)

// Start joins the run: it subscribes to the gossip topics, connects to the
// bootstrap peers, bootstraps the DHT, and starts the background work
// (advertising under the rendezvous key, discovering and connecting to the
// run's peers, pinging them, delivering gossip). ctx bounds that background
// work: pass a context that lives as long as the node, or call Close.
// With bootstrap peers configured, Start fails with ErrBootstrapFailed when
// none can be reached, unless Config.Rejoin is set or Dial reached one of
// them before Start (a joiner that fetched the run manifest).
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return ErrClosed
	case h.started:
		return ErrAlreadyStarted
	}
	runCtx, cancel := context.WithCancel(ctx)
	addrs, err := h.subscribeAddrs()
	if err != nil {
		cancel()
		return err
	}
	peers, err := h.join(runCtx)
	if err != nil {
		addrs.Close()
		cancel()
		return err
	}
	h.started, h.cancel = true, cancel
	h.goLoop(runCtx, PartHost, func(ctx context.Context) { h.watchPeers(ctx, peers) })
	for _, t := range h.gossip.topics {
		h.goLoop(runCtx, PartGossip, func(ctx context.Context) { h.deliverLoop(ctx, t) })
	}
	h.goLoop(runCtx, PartDHT, h.advertiseLoop)
	h.goLoop(runCtx, PartDHT, h.discoverLoop)
	h.goLoop(runCtx, PartHost, h.pingLoop)
	h.goLoop(runCtx, PartHost, func(ctx context.Context) { h.watchAddrs(ctx, addrs) })
	h.goLoop(runCtx, PartHost, h.punchLoop)
	return nil
}

// join does the part of Start that can fail, undoing it on failure.
func (h *Host) join(ctx context.Context) (_ event.Subscription, err error) {
	peers, err := h.h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted), eventbus.BufSize(64))
	if err != nil {
		return nil, fmt.Errorf("p2p: subscribe to identify events: %w", err)
	}
	defer func() {
		if err != nil {
			peers.Close()
			h.leaveTopics()
		}
	}()
	DoPart(ctx, PartGossip, func(ctx context.Context) { err = h.joinTopics(ctx) })
	if err != nil {
		return nil, err
	}
	h.renewConns()
	if err := h.connectBootstrap(ctx); err != nil {
		return nil, err
	}
	if err := h.dht.Bootstrap(ctx); err != nil {
		return nil, fmt.Errorf("p2p: dht bootstrap: %w", err)
	}
	return peers, nil
}

// goLoop runs loop in a goroutine of its own, labelled part (PartLabel).
func (h *Host) goLoop(ctx context.Context, part string, loop func(context.Context)) {
	h.wg.Add(1)
	go DoPart(ctx, part, func(ctx context.Context) {
		defer h.wg.Done()
		loop(ctx)
	})
}

// renewConns closes the connections made before the gossip protocols were
// registered (a joiner's fetch of the run manifest, the DHT's first dials).
// A peer that identified this host on one of them learns that it speaks
// gossipsub only from an identify push, which is not retried when it is
// lost (a busy peer, a timeout), and pubsub opens its stream to a peer only
// on identification: such a peer would never send this host gossip while
// the connection lasts. Start redials the bootstrap peers right after, and
// a new connection is identified afresh.
func (h *Host) renewConns() {
	for _, p := range h.h.Network().Peers() {
		h.h.Network().ClosePeer(p)
	}
}

// connectBootstrap dials every bootstrap peer in parallel.
func (h *Host) connectBootstrap(ctx context.Context) error {
	if len(h.bootstrap) == 0 {
		h.log.Info("no bootstrap peers: starting a new network")
		return nil
	}
	errs := make([]error, len(h.bootstrap))
	var wg sync.WaitGroup
	for i, ai := range h.bootstrap {
		h.clearBackoff(ai.ID) // renewConns just closed it; the DHT's early dials may have failed
		wg.Go(func() { errs[i] = h.connect(ctx, ai) })
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	err := fmt.Errorf("%w: %w", ErrBootstrapFailed, errors.Join(errs...))
	if h.cfg.Rejoin || h.reached.Load() && !errors.Is(err, ErrNotAdmitted) {
		h.log.Warn("no bootstrap peer reachable: starting alone, redialing them until one answers", "err", err)
		return nil
	}
	return err
}

// connect dials one peer with the configured timeout and tags it as a peer
// of the run, so the connection manager keeps it over strangers.
func (h *Host) connect(ctx context.Context, ai peer.AddrInfo) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.DialTimeout)
	defer cancel()
	if err := h.h.Connect(ctx, ai); err != nil {
		if why, ok := h.refusedReason(ai.ID); ok {
			return fmt.Errorf("p2p: connect %s: %w: it refused this node: %s", ai.ID, ErrNotAdmitted, why)
		}
		return fmt.Errorf("p2p: connect %s: %w", ai.ID.ShortString(), err)
	}
	h.cm.TagPeer(ai.ID, runPeerTag, runPeerValue)
	h.remember(ai.ID)
	return nil
}

// Dial connects to ai now, even if a dial of ai failed moments ago: libp2p
// then backs off from ai, and its "dial backoff" would hide why this dial
// fails (the DHT dials the bootstrap peers on its own from New on). For a
// joiner's first contact with a bootstrap peer, before Start.
// A successful Dial marks the run as reached: Start then starts alone when
// its redial of the bootstrap peers fails (they may refuse a burst of
// connections from one address for a while) and keeps redialing them.
func (h *Host) Dial(ctx context.Context, ai peer.AddrInfo) error {
	h.clearBackoff(ai.ID)
	if err := h.h.Connect(ctx, ai); err != nil {
		return err
	}
	h.reached.Store(true)
	return nil
}

// clearBackoff forgets libp2p's dial backoff from id, so that the next dial
// is tried and its error is the real one.
func (h *Host) clearBackoff(id peer.ID) {
	if sw, ok := h.h.Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(id)
	}
}

// Close stops the background work, leaves the topics, and closes the DHT and
// the libp2p host. The Messages channel is closed once nothing more can be
// delivered. Close is idempotent.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		cancel := h.cancel
		h.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		h.stopLife()
		h.wg.Wait()
		h.savePeerBook(true)
		h.leaveTopics()
		h.closeMessages()
		h.closeErr = errors.Join(h.dht.Close(), h.h.Close())
		if h.closeErr != nil {
			h.closeErr = fmt.Errorf("p2p: close: %w", h.closeErr)
		}
	})
	return h.closeErr
}

// PeerInfo describes one peer as this host sees it, for the node's
// /v1/peers.
type PeerInfo struct {
	ID            peer.ID       `json:"id"`
	Addrs         []string      `json:"addrs"`
	Connectedness string        `json:"connectedness"`
	Connected     bool          `json:"connected"`
	Latency       time.Duration `json:"latency_ns"` // EWMA of pings and DHT round trips; 0 if unknown
	Protected     bool          `json:"protected"`  // see Protect (an all-reduce attempt's own protection is not shown)
	Traffic       Traffic       `json:"traffic"`
	GossipScore   float64       `json:"gossip_score"` // 0, or negative after invalid messages; refreshed every second
	// Transport is the transport of the connection in use ("tcp", "quic",
	// "websocket", …; "" when not connected), and Relayed whether it runs
	// through a relay (a /p2p-circuit address) rather than directly.
	Transport string `json:"transport,omitempty"`
	Relayed   bool   `json:"relayed"`
	// Punch is the last hole punch with this peer, nil if none.
	Punch *Punch `json:"punch,omitempty"`
	// Refused is why this host refused the peer admission to the run (an
	// allowlist run; the first reason within AdmitRefuseFor), RefusedBy why
	// the peer refused this host; "" when it did not.
	Refused   string `json:"refused,omitempty"`
	RefusedBy string `json:"refused_by,omitempty"`
}

// Received returns the bytes received from id on every stream so far: a
// count that grows while the peer sends anything, gossip or the averaging's
// streams (node feeds it to the mesh's failure detector, mesh.Heard).
func (h *Host) Received(id peer.ID) uint64 { return h.bw.peer(id).In }

// PeerInfo returns what the host knows about id: addresses from the
// peerstore, connectedness, smoothed round-trip latency, and traffic.
func (h *Host) PeerInfo(id peer.ID) PeerInfo {
	ps := h.h.Peerstore()
	c := h.h.Network().Connectedness(id)
	info := PeerInfo{
		ID:            id,
		Connectedness: c.String(),
		Connected:     c == network.Connected || c == network.Limited, // Limited: through a relay only (Relayed)
		Latency:       ps.LatencyEWMA(id),
		Protected:     h.cm.IsProtected(id, protectRingTag),
		Traffic:       h.bw.peer(id),
		GossipScore:   h.gossipScore(id),
	}
	for _, a := range ps.Addrs(id) {
		info.Addrs = append(info.Addrs, a.String())
	}
	info.Transport, info.Relayed = connKind(h.h.Network().ConnsToPeer(id))
	if p, ok := h.punches.get(id); ok {
		info.Punch = &p
	}
	info.Refused, info.RefusedBy = h.refusals(id)
	return info
}

// connKind names the transport of the best of conns — a direct one before
// a relayed one — and whether that one is relayed.
func connKind(conns []network.Conn) (transport string, relayed bool) {
	for _, c := range conns {
		t, r := addrKind(c.RemoteMultiaddr())
		if transport == "" || relayed && !r {
			transport, relayed = t, r
		}
	}
	return transport, relayed
}

// addrKind returns the transport protocol of a connection's remote address
// and whether it is a relayed (/p2p-circuit) one.
func addrKind(a ma.Multiaddr) (transport string, relayed bool) {
	for _, p := range a.Protocols() {
		switch p.Code {
		case ma.P_CIRCUIT:
			relayed = true
		case ma.P_TCP, ma.P_UDP:
			if transport == "" || transport == "udp" {
				transport = p.Name
			}
		case ma.P_QUIC_V1, ma.P_QUIC, ma.P_WEBTRANSPORT, ma.P_WEBRTC_DIRECT, ma.P_WS, ma.P_WSS:
			transport = p.Name
		}
	}
	return transport, relayed
}

// Peers returns PeerInfo for every currently connected peer.
func (h *Host) Peers() []PeerInfo {
	ids := h.h.Network().Peers()
	out := make([]PeerInfo, 0, len(ids))
	for _, id := range ids {
		out = append(out, h.PeerInfo(id))
	}
	return out
}
