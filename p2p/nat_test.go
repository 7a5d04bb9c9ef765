package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
)

func TestInitialReachability(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Reachability: ReachAuto, Listen: []string{"/ip4/127.0.0.1/tcp/0"}}, ReachPrivate},
		{Config{Reachability: ReachAuto, Listen: []string{"/ip4/192.168.1.5/tcp/4001"}}, ReachPrivate},
		{Config{Reachability: ReachAuto, Listen: []string{"/ip4/45.1.2.3/tcp/4001"}}, ReachPublic},
		{Config{Reachability: ReachAuto, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Announce: []string{"/ip4/45.1.2.3/tcp/4001"}}, ReachPublic},
		{Config{Reachability: ReachAuto, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NATPortMap: true}, ReachAuto},
		{Config{Reachability: ReachPrivate, Listen: []string{"/ip4/45.1.2.3/tcp/4001"}}, ReachPrivate},
		{Config{Reachability: ReachPublic, Listen: []string{"/ip4/127.0.0.1/tcp/0"}}, ReachPublic},
	} {
		if got := initialReachability(c.cfg); got != c.want {
			t.Errorf("%+v: %s, want %s", c.cfg, got, c.want)
		}
	}
	bad := testConfig(t, "r")
	bad.Reachability = "sometimes"
	if err := bad.Validate(); err == nil {
		t.Fatal("reachability sometimes accepted")
	}
}

func TestPunchLog(t *testing.T) {
	var l punchLog
	id := peer.ID("remote")
	if _, ok := l.get(id); ok {
		t.Fatal("a punch before any")
	}
	l.Trace(&holepunch.Event{Remote: id, Timestamp: 1, Evt: &holepunch.StartHolePunchEvt{}})
	l.Trace(&holepunch.Event{Remote: id, Timestamp: 2, Evt: &holepunch.EndHolePunchEvt{Success: false, Error: "timeout"}})
	l.Trace(&holepunch.Event{Remote: id, Timestamp: 3, Evt: &holepunch.EndHolePunchEvt{Success: true, EllapsedTime: 5 * time.Millisecond}})
	p, ok := l.get(id)
	if !ok || !p.Success || p.Took != 5*time.Millisecond || p.At.UnixNano() != 3 || l.ok != 1 || l.fail != 1 {
		t.Fatalf("last punch %+v (%v), ok %d fail %d", p, ok, l.ok, l.fail)
	}
}

// TestRelayReservation: a public member offers a relay; a member behind a
// NAT (private) reserves a slot on it, found among its connected peers. A
// third host, knowing no other address of it, then reaches the private one
// through the relay. (On loopback the relay's addresses are not public, so
// the reserving host does not advertise circuit addresses: the test dials
// one it builds; and identify over the relayed connection soon gives the
// dialer a direct loopback address, so no NAT is emulated here: make test-nat.)
func TestRelayReservation(t *testing.T) {
	pubCfg := testConfig(t, "nat")
	pubCfg.Reachability = ReachPublic
	pub := startHost(t, pubCfg)
	privCfg := testConfig(t, "nat")
	privCfg.Bootstrap = pub.Addrs()
	priv := startHost(t, privCfg)
	if r := priv.Reachability(); r.State != ReachPrivate {
		t.Fatalf("member on loopback: reachability %+v, want private", r)
	}
	if r := pub.Reachability(); r.State != ReachPublic {
		t.Fatalf("forced public: reachability %+v", r)
	}
	other := startHost(t, testConfig(t, "elsewhere"))
	circuit := ma.StringCast(pub.Addrs()[0] + "/p2p-circuit/p2p/" + priv.ID().String())
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(network.WithAllowLimitedConn(context.Background(), "test"), 2*time.Second)
		err := other.h.Connect(ctx, peer.AddrInfo{ID: priv.ID(), Addrs: []ma.Multiaddr{circuit}})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection through the relay after 15 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
