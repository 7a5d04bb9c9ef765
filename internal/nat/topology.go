// Package nat builds a NAT lab on top of package wan: a public segment (the
// "internet") joined by the userspace link emulator, where public members and
// the WAN sides of home routers live, and home LANs behind NAT router
// namespaces doing MASQUERADE (cone-like) or MASQUERADE --random-fully
// (symmetric) and dropping unsolicited inbound traffic as home routers do.
// docs/nat.md draws the topology.
package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/intellect-node/intellect-node/internal/wan"
)

// Kind is how a site reaches the public segment.
type Kind string

// Kinds of site.
const (
	// Public: the member itself sits on the public segment.
	Public Kind = "public"
	// Cone: the member is behind a router doing MASQUERADE, which keeps the
	// source port where it can (endpoint-independent mapping in practice),
	// with stateful filtering of inbound traffic.
	Cone Kind = "cone"
	// Symmetric: MASQUERADE --random-fully, a new random port per
	// destination (endpoint-dependent mapping); hole punching fails.
	Symmetric Kind = "symmetric"
)

// Addresses inside the lab's namespaces only; traffic never leaves them.
var (
	// PublicSubnet is the public segment. 11.0.0.0/8 is not in any of the
	// ranges libp2p treats as private or unroutable (10/8, 100.64/10,
	// 172.16/12, 192.168/16, the TEST-NETs, ...), so members count it as public.
	PublicSubnet = netip.MustParsePrefix("11.77.0.0/24")
	// LANSubnet is every home's LAN: the same 192.168.1.0/24 in every home,
	// as with real home routers, so peers' private addresses collide.
	LANSubnet = netip.MustParsePrefix("192.168.1.0/24")
	// RouterLANAddr is each router's address on its LAN.
	RouterLANAddr = netip.MustParseAddr("192.168.1.1")
	// MemberLANAddr is the member's address on its home LAN.
	MemberLANAddr = netip.MustParseAddr("192.168.1.2")
)

// Device names. The router's WAN device is the wan package's TUN device.
const (
	WANDevice       = wan.Device // router (or public member) on the public segment
	RouterLANDevice = "lan0"     // router's side of the LAN veth
	MemberLANDevice = "eth0"     // member's side of the LAN veth
)

// ErrTopology is wrapped by every error about a topology.
var ErrTopology = errors.New("nat: bad topology")

// Topology is a geography (its hosts are the sites; the link emulator puts
// the profile's delays between them) and how each site is connected.
type Topology struct {
	// Profile gives the sites' names and the paths between them.
	Profile wan.Profile
	// Kinds[i] is how site i (host i of Profile) is connected.
	Kinds []Kind
}

// Validate checks the profile and that every site has a known kind.
func (t Topology) Validate() error {
	if err := t.Profile.Validate(); err != nil {
		return err
	}
	if len(t.Kinds) != len(t.Profile.Hosts) {
		return fmt.Errorf("%w: %d kinds for %d sites", ErrTopology, len(t.Kinds), len(t.Profile.Hosts))
	}
	for i, k := range t.Kinds {
		switch k {
		case Public, Cone, Symmetric:
		default:
			return fmt.Errorf("%w: site %s: unknown kind %q", ErrTopology, t.Profile.Hosts[i].Name, k)
		}
	}
	return nil
}

// WithKinds returns profile p's sites connected as kinds, e.g.
// WithKinds(usa, Public, Cone, Cone, Symmetric).
func WithKinds(p wan.Profile, kinds ...Kind) Topology {
	return Topology{Profile: p, Kinds: kinds}
}

// String is e.g. "sfo:public dfw:cone chi:cone nyc:symmetric".
func (t Topology) String() string {
	parts := make([]string, len(t.Kinds))
	for i, k := range t.Kinds {
		name := "?"
		if i < len(t.Profile.Hosts) {
			name = t.Profile.Hosts[i].Name
		}
		parts[i] = name + ":" + string(k)
	}
	return strings.Join(parts, " ")
}

// PublicAddr is site i's address on the public segment (the member's for a
// public site, the router's WAN address for a NATed one).
func PublicAddr(i int) netip.Addr { return wan.SubnetAddr(PublicSubnet, i) }

// MemberAddr is the address of site i's member on its own interface.
func (t Topology) MemberAddr(i int) netip.Addr {
	if t.Kinds[i] == Public {
		return PublicAddr(i)
	}
	return MemberLANAddr
}

// RouterRules is the iptables-restore input of a router of the given kind:
// source NAT of everything leaving through the WAN device, and inbound from
// the WAN accepted only for connections the LAN opened. Unsolicited packets
// are dropped, not rejected: a router that answers a SYN with RST breaks
// TCP hole punching (docs/nat.md). It fails for Public, which has no router.
func RouterRules(k Kind) (string, error) {
	var masq string
	switch k {
	case Cone:
		masq = "-A POSTROUTING -o " + WANDevice + " -j MASQUERADE"
	case Symmetric:
		masq = "-A POSTROUTING -o " + WANDevice + " -j MASQUERADE --random-fully"
	default:
		return "", fmt.Errorf("%w: no router for kind %q", ErrTopology, k)
	}
	established := " -i " + WANDevice + " -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n"
	return "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		masq + "\nCOMMIT\n" +
		"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT" + established + "-A INPUT -i " + WANDevice + " -j DROP\n" +
		"-A FORWARD" + established + "-A FORWARD -i " + WANDevice + " -j DROP\n" +
		"COMMIT\n", nil
}

// lanBatch is the `ip -batch` input that joins router namespace router and
// LAN namespace lan with a veth pair and addresses both ends; it runs in the
// router's namespace (ip -n router -batch -).
func lanBatch(lan string) string {
	bits := LANSubnet.Bits()
	return fmt.Sprintf("link add %s type veth peer name %s netns %s\n", RouterLANDevice, MemberLANDevice, lan) +
		fmt.Sprintf("addr add %s dev %s\nlink set %s up\n", netip.PrefixFrom(RouterLANAddr, bits), RouterLANDevice, RouterLANDevice)
}

// memberBatch is the `ip -batch` input run in the LAN namespace: loopback,
// the member's address and its default route through the router.
func memberBatch() string {
	return fmt.Sprintf("link set lo up\nlink set %s up\naddr add %s dev %s\nroute add default via %s\n",
		MemberLANDevice, netip.PrefixFrom(MemberLANAddr, LANSubnet.Bits()), MemberLANDevice, RouterLANAddr)
}
