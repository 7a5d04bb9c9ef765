package p2p

import (
	"context"
	"errors"
	ma "github.com/multiformats/go-multiaddr"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	yamux "github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	noise "github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
)

// testConfig returns a Config for a host on loopback with fast timers.
func testConfig(t testing.TB, run string) Config {
	return Config{
		Listen:            []string{"/ip4/127.0.0.1/tcp/0"},
		Run:               run,
		Logger:            testLogger(),
		GossipHeartbeat:   50 * time.Millisecond,
		DiscoveryInterval: time.Second,
		AdvertiseInterval: 2 * time.Second,
		DialTimeout:       5 * time.Second,
		PingInterval:      500 * time.Millisecond,
	}
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startHost creates and starts a host; it is closed when the test ends.
func startHost(t testing.TB, cfg Config) *Host {
	t.Helper()
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("new host: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start host: %v", err)
	}
	return h
}

// startNetwork starts n hosts of one run where every host but the first
// knows only the first as bootstrap.
func startNetwork(t testing.TB, run string, n int) []*Host {
	t.Helper()
	hosts := []*Host{startHost(t, testConfig(t, run))}
	for range n - 1 {
		cfg := testConfig(t, run)
		cfg.Bootstrap = hosts[0].Addrs()
		hosts = append(hosts, startHost(t, cfg))
	}
	return hosts
}

// meshTimeout bounds the wait for connections and gossip meshes to form:
// 0.5-1 s normally, but -race on a loaded 2-core machine is 10-20x slower.
const meshTimeout = time.Minute

// eventually polls cond until it holds or the deadline passes. It awaits a
// state reached by background protocols that expose no completion event.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// fullMesh reports whether every host is connected to, and sees on the
// topic, every other host.
func fullMesh(hosts []*Host) bool {
	for _, a := range hosts {
		topic := map[peer.ID]bool{}
		for _, p := range a.TopicPeers() {
			topic[p] = true
		}
		for _, b := range hosts {
			if a == b {
				continue
			}
			if a.Libp2p().Network().Connectedness(b.ID()) != network.Connected || !topic[b.ID()] {
				return false
			}
		}
	}
	return true
}

// receive waits for a message with the given payload on h, skipping others.
func receive(t testing.TB, h *Host, want string, timeout time.Duration) Message {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-h.Messages():
			if !ok {
				t.Fatalf("%s: messages channel closed", h.ID().ShortString())
			}
			if string(m.Data) == want {
				return m
			}
		case <-timer.C:
			t.Fatalf("%s: no message %q within %v", h.ID().ShortString(), want, timeout)
		}
	}
}

func publishAndReceive(t *testing.T, from *Host, to []*Host, payload string) {
	t.Helper()
	if err := from.Publish(context.Background(), []byte(payload)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, h := range to {
		if h == from {
			continue
		}
		if m := receive(t, h, payload, 10*time.Second); m.From != from.ID() {
			t.Fatalf("message from %s attributed to %s", from.ID(), m.From)
		}
	}
}

// TestDiscoveryGossipAndBootstrapLoss is the main scenario: hosts that know
// only the first one find each other through the DHT and form the gossip
// mesh; a message reaches all; the first host dies and the rest stay
// connected; a newcomer that bootstraps from another host finds everyone.
func TestDiscoveryGossipAndBootstrapLoss(t *testing.T) {
	n := 6
	if testing.Short() {
		n = 4
	}
	start := time.Now()
	hosts := startNetwork(t, "discovery", n)
	eventually(t, meshTimeout, "full mesh", func() bool { return fullMesh(hosts) })
	t.Logf("%d hosts connected and on the topic after %v", n, time.Since(start))

	publishAndReceive(t, hosts[n-1], hosts, "hello from the last")
	publishAndReceive(t, hosts[0], hosts, "hello from the bootstrap")

	// The bootstrap node dies. Nobody is special: the others stay connected.
	if err := hosts[0].Close(); err != nil {
		t.Fatalf("close bootstrap: %v", err)
	}
	if _, ok := <-hosts[0].Messages(); ok {
		t.Fatal("messages channel of a closed host still open")
	}
	rest := hosts[1:]
	eventually(t, 10*time.Second, "others to notice the bootstrap left", func() bool {
		for _, h := range rest {
			if h.Libp2p().Network().Connectedness(hosts[0].ID()) == network.Connected {
				return false
			}
		}
		return true
	})
	if !fullMesh(rest) {
		t.Fatal("losing the bootstrap node disconnected the others")
	}
	publishAndReceive(t, rest[1], rest, "after the bootstrap died")

	// A newcomer knowing only a non-first host finds all the others.
	cfg := testConfig(t, "discovery")
	cfg.Bootstrap = rest[2].Addrs()
	start = time.Now()
	newcomer := startHost(t, cfg)
	all := append([]*Host{newcomer}, rest...)
	eventually(t, meshTimeout, "newcomer in the full mesh", func() bool { return fullMesh(all) })
	t.Logf("newcomer connected to %d peers after %v", len(rest), time.Since(start))
	publishAndReceive(t, newcomer, all, "hello from the newcomer")
}

func TestValidatorRejectsMalformed(t *testing.T) {
	hosts := startNetwork(t, "validator", 3)
	sender, receivers := hosts[0], hosts[1:]
	for _, h := range receivers {
		h.SetValidator(func(_ peer.ID, data []byte) bool { return !strings.HasPrefix(string(data), "bad") })
	}
	eventually(t, meshTimeout, "full mesh", func() bool { return fullMesh(hosts) })

	// The sender accepts anything (no validator), so "bad" goes out on the
	// wire; receivers must refuse it.
	for _, payload := range []string{"bad: one", "good: one"} {
		if err := sender.Publish(context.Background(), []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range receivers {
		receive(t, h, "good: one", 10*time.Second)
		eventually(t, 10*time.Second, "rejection counted", func() bool { return h.GossipStats().Rejected >= 1 })
	}
	// "bad" has been rejected everywhere (counted above); nothing but good
	// messages may have reached the application.
	publishAndReceive(t, sender, receivers, "good: two")
	for _, h := range receivers {
		select {
		case m := <-h.Messages():
			t.Fatalf("unexpected message %q", m.Data)
		default:
		}
		if st := h.GossipStats(); st.Delivered != 2 {
			t.Fatalf("delivered %d messages, want 2 (%+v)", st.Delivered, st)
		}
	}

	// A host's own validator applies to its own publications.
	receivers[0].SetValidator(func(peer.ID, []byte) bool { return false })
	if err := receivers[0].Publish(context.Background(), []byte("anything")); err == nil {
		t.Fatal("publish of a message our own validator rejects succeeded")
	}
	receivers[0].SetValidator(nil)
	publishAndReceive(t, receivers[0], hosts, "validator removed")
}

func TestPublishLimitsAndLifecycle(t *testing.T) {
	cfg := testConfig(t, "lifecycle")
	cfg.GossipMaxSize = 100
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(context.Background(), []byte("x")); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("publish before start: %v", err)
	}
	if h.TopicPeers() != nil {
		t.Fatal("topic peers before start")
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second start: %v", err)
	}
	if err := h.Publish(context.Background(), make([]byte, 101)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized publish: %v", err)
	}
	if err := h.Publish(context.Background(), make([]byte, 100)); err != nil {
		t.Fatalf("publish at the limit: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := h.Publish(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	if err := h.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}

func TestStartFailsWhenNoBootstrapReachable(t *testing.T) {
	dead, err := New(context.Background(), testConfig(t, "dead"))
	if err != nil {
		t.Fatal(err)
	}
	addrs := dead.Addrs()
	dead.Close()
	cfg := testConfig(t, "dead")
	cfg.Bootstrap = addrs
	cfg.DialTimeout = 2 * time.Second
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(context.Background()); !errors.Is(err, ErrBootstrapFailed) {
		t.Fatalf("start with a dead bootstrap: %v, want ErrBootstrapFailed", err)
	}
}

// newHomeHost makes a host of run, not started, whose identity lives in a
// home of its own, so that restartHost can bring it back as the same peer.
func newHomeHost(t testing.TB, run string) (*Host, Config) {
	t.Helper()
	cfg := testConfig(t, run)
	cfg.Home = t.TempDir()
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h, cfg
}

// restartHost starts old's config again on addr, one of old's full
// addresses, and checks that it came back as the same peer.
func restartHost(t testing.TB, cfg Config, old *Host, addr string) *Host {
	t.Helper()
	cfg.Listen = []string{strings.Split(addr, "/p2p/")[0]}
	back := startHost(t, cfg)
	if back.ID() != old.ID() {
		t.Fatalf("the host came back as %s, want %s", back.ID(), old.ID())
	}
	return back
}

// TestRejoinStartsAloneAndRedials: a member restarted with its home while
// no bootstrap peer answers (its network cut) starts anyway, and connects
// once the bootstrap peer is back on its address.
func TestRejoinStartsAloneAndRedials(t *testing.T) {
	boot, bootCfg := newHomeHost(t, "rejoin")
	addrs := boot.Addrs()
	boot.Close()
	cfg := testConfig(t, "rejoin")
	cfg.Bootstrap, cfg.Rejoin, cfg.DialTimeout = addrs, true, time.Second
	h := startHost(t, cfg) // fails the test if Start fails
	back := restartHost(t, bootCfg, boot, addrs[0])
	eventually(t, meshTimeout, "the rejoined member connected to its bootstrap peer", func() bool {
		return fullMesh([]*Host{h, back})
	})
}

// TestJoinerStartsAloneWhenBootstrapGoneAfterDial: a joiner reached its
// bootstrap peer (the manifest fetch) but Start's redial of it fails (the
// peer refuses a burst of connections from one address, or went away):
// the run exists, so Start starts alone and redials, as on a rejoin,
// instead of failing with ErrBootstrapFailed.
func TestJoinerStartsAloneWhenBootstrapGoneAfterDial(t *testing.T) {
	boot, bootCfg := newHomeHost(t, "reached")
	if err := boot.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	addrs := boot.Addrs()
	cfg := testConfig(t, "reached")
	cfg.Bootstrap, cfg.DialTimeout = addrs, time.Second
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ai, err := peer.AddrInfoFromString(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Dial(context.Background(), *ai); err != nil {
		t.Fatal(err)
	}
	boot.Close()
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start after the bootstrap peer went: %v", err)
	}
	back := restartHost(t, bootCfg, boot, addrs[0])
	eventually(t, meshTimeout, "the joiner connected to its returned bootstrap peer", func() bool {
		return fullMesh([]*Host{h, back})
	})
}

// TestGossipBothWaysAfterEarlyConnection: a joiner connects to its
// bootstrap peer before it starts (to fetch the run manifest) and the
// bootstrap peer misses the identify push that tells it the joiner now
// speaks gossipsub (here it refuses pushes): gossip must still flow both
// ways once the joiner has started.
func TestGossipBothWaysAfterEarlyConnection(t *testing.T) {
	a := startHost(t, testConfig(t, "early"))
	a.Libp2p().RemoveStreamHandler(identify.IDPush)
	cfg := testConfig(t, "early")
	cfg.Bootstrap = a.Addrs()
	b, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ai, err := peer.AddrInfoFromString(a.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Dial(context.Background(), *ai); err != nil {
		t.Fatal(err)
	}
	eventually(t, meshTimeout, "a identified b", func() bool {
		protos, err := a.Libp2p().Peerstore().GetProtocols(b.ID())
		return err == nil && len(protos) > 0
	})
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, meshTimeout, "both on the topic", func() bool { return fullMesh([]*Host{a, b}) })
	publishAndReceive(t, a, []*Host{b}, "a to b")
	publishAndReceive(t, b, []*Host{a}, "b to a")
}

func TestConfigValidate(t *testing.T) {
	id := "12D3KooWGzBdq1n3vAYU8XBfJpXqyMhqkDuYBFdBTmVZmAEFu2eZ"
	cases := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"run with dots and dashes", func(c *Config) { c.Run = "llama-1b_v2.3" }, true},
		{"run with slash", func(c *Config) { c.Run = "a/b" }, false},
		{"run with space", func(c *Config) { c.Run = "a b" }, false},
		{"run too long", func(c *Config) { c.Run = strings.Repeat("r", 65) }, false},
		{"psk 32 bytes", func(c *Config) { c.PSK = make([]byte, 32) }, true},
		{"psk 16 bytes", func(c *Config) { c.PSK = make([]byte, 16) }, false},
		{"bad listen", func(c *Config) { c.Listen = []string{"tcp://0.0.0.0:1"} }, false},
		{"bootstrap with id", func(c *Config) { c.Bootstrap = []string{"/ip4/10.0.0.1/tcp/4021/p2p/" + id} }, true},
		{"bootstrap without id", func(c *Config) { c.Bootstrap = []string{"/ip4/10.0.0.1/tcp/4021"} }, false},
		{"water marks inverted", func(c *Config) { c.ConnsLow, c.ConnsHigh = 10, 5 }, false},
		{"gossip size too big", func(c *Config) { c.GossipMaxSize = 2 << 20 }, false},
		{"negative interval", func(c *Config) { c.PingInterval = -time.Second }, false},
		{"a further topic", func(c *Config) { c.Topics = []string{"account/1"} }, true},
		{"topic named twice", func(c *Config) { c.Topics = []string{"a/1", "a/1"} }, false},
		{"topic is the mesh's", func(c *Config) { c.Topics = []string{MeshTopic} }, false},
		{"topic upper case", func(c *Config) { c.Topics = []string{"Account/1"} }, false},
		{"topic empty", func(c *Config) { c.Topics = []string{""} }, false},
		{"topic too long", func(c *Config) { c.Topics = []string{strings.Repeat("t", 33)} }, false},
		{"too many topics", func(c *Config) { c.Topics = []string{"a", "b", "c", "d", "e"} }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg Config
			c.edit(&cfg)
			err := cfg.Validate()
			if (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			if err == nil && (len(cfg.Listen) == 0 || cfg.Run == "" || cfg.Logger == nil || cfg.GossipMaxSize == 0) {
				t.Fatalf("defaults not filled: %+v", cfg)
			}
		})
	}
}

func TestPrivateNetworkPSK(t *testing.T) {
	key := func(b byte) []byte {
		k := make([]byte, PSKSize)
		for i := range k {
			k[i] = b + byte(i)
		}
		return k
	}
	cfgA := testConfig(t, "psk")
	cfgA.PSK = key(1)
	a := startHost(t, cfgA)

	cfgB := testConfig(t, "psk")
	cfgB.PSK = key(1)
	cfgB.Bootstrap = a.Addrs()
	b := startHost(t, cfgB)
	eventually(t, meshTimeout, "PSK peers on the topic", func() bool { return fullMesh([]*Host{a, b}) })
	publishAndReceive(t, a, []*Host{b}, "private hello")

	for name, psk := range map[string][]byte{"other key": key(2), "no key": nil} {
		cfg := testConfig(t, "psk")
		cfg.PSK = psk
		cfg.Bootstrap = a.Addrs()
		cfg.DialTimeout = 2 * time.Second
		h, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = h.Start(context.Background())
		h.Close()
		if !errors.Is(err, ErrBootstrapFailed) {
			t.Fatalf("%s: joined a private network: %v", name, err)
		}
	}
}

func TestPeerInfoAndProtect(t *testing.T) {
	hosts := startNetwork(t, "peerinfo", 2)
	a, b := hosts[0], hosts[1]
	eventually(t, meshTimeout, "connection", func() bool { return fullMesh(hosts) })
	eventually(t, meshTimeout, "a latency estimate", func() bool {
		// DHT requests record round trips too; ping records them every PingInterval.
		return a.PeerInfo(b.ID()).Latency > 0
	})
	info := a.PeerInfo(b.ID())
	if !info.Connected || info.Connectedness != network.Connected.String() {
		t.Fatalf("peer info connectedness: %+v", info)
	}
	if info.Transport != "tcp" || info.Relayed {
		t.Fatalf("peer info transport %q relayed %v, want a direct tcp connection", info.Transport, info.Relayed)
	}
	if len(info.Addrs) == 0 || !strings.HasPrefix(info.Addrs[0], "/ip4/127.0.0.1/tcp/") {
		t.Fatalf("peer info addrs: %v", info.Addrs)
	}
	conns := a.Libp2p().Network().ConnsToPeer(b.ID())
	if len(conns) == 0 {
		t.Fatal("no connection")
	}
	if st := conns[0].ConnState(); st.Security != libp2ptls.ID || st.StreamMultiplexer != yamux.ID || st.Transport != "tcp" {
		t.Fatalf("connection uses %+v, want TCP + TLS + yamux", st)
	}
	if info.Traffic.In == 0 || info.Traffic.Out == 0 {
		t.Fatalf("no traffic counted with a connected peer: %+v", info.Traffic)
	}
	if info.Protected {
		t.Fatal("peer protected before Protect")
	}
	a.Protect(b.ID())
	if !a.PeerInfo(b.ID()).Protected {
		t.Fatal("Protect had no effect")
	}
	a.Unprotect(b.ID())
	if a.PeerInfo(b.ID()).Protected {
		t.Fatal("Unprotect had no effect")
	}
	peers := a.Peers()
	if len(peers) != 1 || peers[0].ID != b.ID() {
		t.Fatalf("Peers() = %+v", peers)
	}
	if full := a.Addrs(); len(full) == 0 || !strings.HasSuffix(full[0], "/p2p/"+a.ID().String()) {
		t.Fatalf("Addrs() = %v", full)
	}
}

// TestRejoinAfterLosingAllConnections cuts every connection of one host after
// the bootstrap node died; the network must heal without the bootstrap.
func TestRejoinAfterLosingAllConnections(t *testing.T) {
	hosts := startNetwork(t, "rejoin", 3)
	eventually(t, meshTimeout, "full mesh", func() bool { return fullMesh(hosts) })
	hosts[0].Close()
	b, c := hosts[1], hosts[2]
	eventually(t, meshTimeout, "the other peer among c's rejoin candidates", func() bool {
		return slices.ContainsFunc(c.rejoinCandidates(), func(ai peer.AddrInfo) bool { return ai.ID == b.ID() })
	})
	seen := map[peer.ID]bool{}
	for _, ai := range c.rejoinCandidates() {
		if seen[ai.ID] || len(ai.Addrs) == 0 {
			t.Fatalf("rejoin candidate %v duplicated or without addresses", ai)
		}
		seen[ai.ID] = true
	}
	for _, p := range c.Libp2p().Network().Peers() {
		c.Libp2p().Network().ClosePeer(p)
	}
	eventually(t, meshTimeout, "mesh healed", func() bool { return fullMesh([]*Host{b, c}) })
	publishAndReceive(t, c, []*Host{b}, "back again")
}

// TestNoiseOnlyPeerConnects checks that TLS is preferred but not required:
// a peer offering only Noise still gets in.
func TestNoiseOnlyPeerConnects(t *testing.T) {
	h := startHost(t, testConfig(t, "noise"))
	other, err := libp2p.New(
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.Security(noise.ID, noise.New),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := other.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Libp2p().Addrs()}); err != nil {
		t.Fatal(err)
	}
	conns := other.Network().ConnsToPeer(h.ID())
	if len(conns) == 0 || conns[0].ConnState().Security != noise.ID {
		t.Fatalf("connection state %+v, want Noise", conns)
	}
}

func TestAnnounceReplacesAdvertisedAddrs(t *testing.T) {
	cfg := testConfig(t, "announce")
	cfg.Announce = []string{"/ip4/203.0.113.7/tcp/4021"}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want := "/ip4/203.0.113.7/tcp/4021/p2p/" + h.ID().String()
	if got := h.Addrs(); len(got) != 1 || got[0] != want {
		t.Fatalf("Addrs() = %v, want [%s]", got, want)
	}
}

// TestAddrKind: the transport and the relayed flag of a connection's remote
// address, as /v1/peers shows them.
func TestAddrKind(t *testing.T) {
	relay := "12D3KooWRk9Dzqmc4yqimHafkH5DQG9Dtc2QEmkqGE7FDBdYbKYt"
	for _, c := range []struct {
		addr      string
		transport string
		relayed   bool
	}{
		{"/ip4/203.0.113.7/tcp/4001", "tcp", false},
		{"/ip6/::1/udp/4001/quic-v1", "quic-v1", false},
		{"/ip4/203.0.113.7/tcp/443/ws", "ws", false},
		{"/ip4/203.0.113.7/tcp/4001/p2p/" + relay + "/p2p-circuit", "tcp", true},
		{"/ip4/203.0.113.7/udp/4001/quic-v1/p2p/" + relay + "/p2p-circuit", "quic-v1", true},
	} {
		a, err := ma.NewMultiaddr(c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if tr, r := addrKind(a); tr != c.transport || r != c.relayed {
			t.Errorf("%s: %q relayed %v, want %q %v", c.addr, tr, r, c.transport, c.relayed)
		}
	}
	if tr, r := connKind(nil); tr != "" || r {
		t.Errorf("no connection: %q %v", tr, r)
	}
}

// TestListenEveryFamily: a host listens on every address of its Listen list
// that can be bound — TCP over IPv4 and IPv6, QUIC — and starts although one
// of them (an address no interface has) cannot be, as with DefaultListen on a
// machine without IPv6.
func TestListenEveryFamily(t *testing.T) {
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	cfg := testConfig(t, "families")
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0", "/ip6/::1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1",
		"/ip4/192.0.2.1/tcp/0"} // 192.0.2.1 (TEST-NET-1) is on no interface here
	h := startHost(t, cfg)
	for _, prefix := range []string{"/ip4/127.0.0.1/tcp/", "/ip6/::1/tcp/", "/ip4/127.0.0.1/udp/"} {
		if !slices.ContainsFunc(h.Addrs(), func(a string) bool { return strings.HasPrefix(a, prefix) }) {
			t.Errorf("Addrs() = %v: none starts with %s", h.Addrs(), prefix)
		}
	}
	if !slices.Contains(DefaultListen, "/ip6/::/tcp/4001") || !slices.Contains(DefaultListen, "/ip6/::/udp/4001/quic-v1") {
		t.Errorf("DefaultListen %v lacks IPv6", DefaultListen)
	}
}
