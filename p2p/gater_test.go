package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestBlockExcludesPeer: after a blocks c, c's connection to a is gone, c
// cannot connect again, a drops gossip c authored even when b relays it,
// and a still hears b.
func TestBlockExcludesPeer(t *testing.T) {
	hosts := startNetwork(t, "block", 3)
	a, b, c := hosts[0], hosts[1], hosts[2]
	eventually(t, 60*time.Second, "gossip mesh of 3", func() bool { return fullMesh(hosts) })
	if !a.Block(c.ID(), "test evidence") || a.Block(c.ID(), "again") {
		t.Fatal("Block did not report the first block only")
	}
	if ex := a.Excluded(); len(ex) != 1 || ex[0].ID != c.ID() || ex[0].Evidence != "test evidence" {
		t.Fatalf("excluded %+v", ex)
	}
	eventually(t, 10*time.Second, "c disconnected from a", func() bool {
		return a.Libp2p().Network().Connectedness(c.ID()) != network.Connected
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The dialer may finish its handshake before a refuses the connection;
	// a never keeps it.
	c.Libp2p().Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.Libp2p().Addrs()})
	eventually(t, 5*time.Second, "a refusing c", func() bool {
		return a.Libp2p().Network().Connectedness(c.ID()) != network.Connected
	})
	if err := c.Publish(context.Background(), []byte("from c")); err != nil {
		t.Fatal(err)
	}
	receive(t, b, "from c", 10*time.Second) // b has it and relays it...
	if err := b.Publish(context.Background(), []byte("from b")); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for { // ...but a delivers b's message only
		select {
		case m := <-a.Messages():
			switch string(m.Data) {
			case "from c":
				t.Fatal("a delivered gossip authored by the blocked peer")
			case "from b":
				return
			}
		case <-timer.C:
			t.Fatal("a did not deliver b's message")
		}
	}
}
