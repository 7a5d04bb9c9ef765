package nat

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/internal/wan"
)

// needRoot skips unless the test can build namespaces.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices, iptables)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("no iptables-restore (make test-nat installs it)")
	}
}

// threeSites is a public site, a cone-NAT home and a symmetric-NAT home,
// 10 ms apart.
func threeSites() Topology {
	p := wan.Profile{Name: "nat3", Hosts: []wan.ProfileHost{{Name: "pub"}, {Name: "cone"}, {Name: "sym"}},
		Default: &wan.Path{RTTMS: 10}}
	return WithKinds(p, Public, Cone, Symmetric)
}

// TestLabNAT: outbound connections from both homes reach the public member
// from their router's public address, the cone router keeps the source port
// and the symmetric one does not; unsolicited inbound SYNs to a router are
// dropped (the dial times out, no RST); Close deletes every namespace.
func TestLabNAT(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	l, err := Start(ctx, threeSites(), wan.Options{}) // default prefix: make wan-cleanup finds leftovers
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ln, err := l.Net.Listen(0, "tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := acceptRemotes(ln)
	target := netip.AddrPortFrom(PublicAddr(0), 7000).String()
	for _, site := range []int{1, 2} {
		got := dialFromPort(t, l, site, target, 40000, seen)
		if got.Addr() != PublicAddr(site) {
			t.Errorf("site %d seen from %v, want its router's %v", site, got, PublicAddr(site))
		}
		if keeps := got.Port() == 40000; keeps != (l.Topology.Kinds[site] == Cone) {
			t.Errorf("site %d (%s): source port 40000 became %d", site, l.Topology.Kinds[site], got.Port())
		}
	}
	checkUnsolicitedDropped(t, l)
	names := []string{l.MemberNetns(1), l.RouterNetns(1), l.MemberNetns(0)}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(wan.NetnsDir, n)); err == nil {
			t.Errorf("namespace %s left after Close", n)
		}
	}
}

// acceptRemotes accepts on ln and sends every connection's remote address.
func acceptRemotes(ln net.Listener) <-chan netip.AddrPort {
	ch := make(chan netip.AddrPort, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a := c.RemoteAddr().(*net.TCPAddr).AddrPort()
			ch <- netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
			c.Close()
		}
	}()
	return ch
}

// dialFromPort connects from site's member, bound to local port port, and
// returns the source address the listener saw.
func dialFromPort(t *testing.T, l *Lab, site int, target string, port int, seen <-chan netip.AddrPort) netip.AddrPort {
	t.Helper()
	var c net.Conn
	err := inMember(l, site, func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}, Timeout: 5 * time.Second}
		var err error
		c, err = d.Dial("tcp", target)
		return err
	})
	if err != nil {
		t.Fatalf("site %d: dial %s: %v", site, target, err)
	}
	defer c.Close()
	select {
	case a := <-seen:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("site %d: listener saw no connection", site)
		return netip.AddrPort{}
	}
}

// checkUnsolicitedDropped dials the cone router's public address from the
// public member, on a port the home's member listens on: the SYN must be
// dropped (timeout), neither answered by RST nor forwarded.
func checkUnsolicitedDropped(t *testing.T, l *Lab) {
	t.Helper()
	ln, err := listenMember(l, 1, ":7001")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := l.Dial(ctx, 0, "tcp", netip.AddrPortFrom(PublicAddr(1), 7001).String())
	if err == nil {
		c.Close()
		t.Fatal("unsolicited inbound connection reached the home")
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("router answered an unsolicited SYN with RST: %v", err)
	}
}
