// Package p2ptest starts real libp2p hosts on 127.0.0.1 for the tests of
// p2p's stream protocols (p2p/ring, p2p/ckpt).
package p2ptest

import (
	"context"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// Host starts a real libp2p host on 127.0.0.1, TCP + TLS + yamux only,
// closed when the test ends.
func Host(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(
		libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay(),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Connect connects from to every host of to and returns their ids.
func Connect(t testing.TB, from host.Host, to ...host.Host) []peer.ID {
	t.Helper()
	var ids []peer.ID
	for _, h := range to {
		from.Peerstore().AddAddrs(h.ID(), h.Addrs(), peerstore.PermanentAddrTTL)
		if err := from.Connect(context.Background(), peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID())
	}
	return ids
}
