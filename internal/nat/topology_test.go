package nat

import (
	"errors"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/internal/wan"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// TestRouterRules: cone and symmetric routers differ only in --random-fully;
// inbound from the WAN is accepted only for known connections and otherwise
// dropped, never rejected; a public site has no router.
func TestRouterRules(t *testing.T) {
	cone, err := RouterRules(Cone)
	if err != nil {
		t.Fatal(err)
	}
	sym, err := RouterRules(Symmetric)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-A POSTROUTING -o wan0 -j MASQUERADE\n",
		"-A INPUT -i wan0 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n-A INPUT -i wan0 -j DROP\n",
		"-A FORWARD -i wan0 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n-A FORWARD -i wan0 -j DROP\n",
	} {
		if !strings.Contains(cone, want) {
			t.Errorf("cone rules lack %q:\n%s", want, cone)
		}
	}
	if strings.Contains(cone, "random-fully") || !strings.Contains(sym, "MASQUERADE --random-fully\n") {
		t.Errorf("random-fully must be on the symmetric router only:\ncone:\n%s\nsym:\n%s", cone, sym)
	}
	if strings.Contains(cone+sym, "REJECT") {
		t.Error("a router must drop unsolicited inbound, not reject it")
	}
	if got := strings.Count(cone, "COMMIT\n"); got != 2 {
		t.Errorf("%d COMMITs, want 2 (nat and filter tables)", got)
	}
	if _, err := RouterRules(Public); !errors.Is(err, ErrTopology) {
		t.Errorf("RouterRules(Public): %v, want ErrTopology", err)
	}
}

// TestTopologyValidate: one kind per site, known kinds only.
func TestTopologyValidate(t *testing.T) {
	p, _ := wan.Lookup("usa")
	good := WithKinds(p, Public, Cone, Cone, Symmetric)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := good.String(); s != "sfo:public dfw:cone chi:cone nyc:symmetric" {
		t.Errorf("String() = %q", s)
	}
	for name, bad := range map[string]Topology{
		"too few kinds": WithKinds(p, Public, Cone),
		"unknown kind":  WithKinds(p, Public, Cone, "full-cone", Cone),
	} {
		if err := bad.Validate(); !errors.Is(err, ErrTopology) {
			t.Errorf("%s: %v, want ErrTopology", name, err)
		}
	}
}

// TestAddresses: public sites and routers share the public /24 in site
// order; every home member has the same LAN address.
func TestAddresses(t *testing.T) {
	p, _ := wan.Lookup("usa")
	top := WithKinds(p, Public, Cone, Cone, Symmetric)
	if got := top.MemberAddr(0).String(); got != "11.77.0.1" {
		t.Errorf("public member address %s", got)
	}
	if got := PublicAddr(3).String(); got != "11.77.0.4" {
		t.Errorf("site 3's public address %s", got)
	}
	if top.MemberAddr(1) != MemberLANAddr || top.MemberAddr(3) != MemberLANAddr {
		t.Errorf("home members at %v, %v; want %v", top.MemberAddr(1), top.MemberAddr(3), MemberLANAddr)
	}
	// What libp2p itself will conclude about these addresses.
	for _, c := range []struct {
		addr   string
		public bool
	}{{"/ip4/" + PublicAddr(0).String() + "/tcp/4001", true}, {"/ip4/" + PublicAddr(3).String() + "/udp/1/quic-v1", true},
		{"/ip4/" + MemberLANAddr.String() + "/tcp/4001", false}} {
		if got := manet.IsPublicAddr(ma.StringCast(c.addr)); got != c.public {
			t.Errorf("libp2p: IsPublicAddr(%s) = %v, want %v", c.addr, got, c.public)
		}
	}
	b := lanBatch("L") + memberBatch()
	for _, want := range []string{"peer name eth0 netns L", "addr add 192.168.1.1/24 dev lan0", "route add default via 192.168.1.1"} {
		if !strings.Contains(b, want) {
			t.Errorf("ip batch lacks %q:\n%s", want, b)
		}
	}
}
