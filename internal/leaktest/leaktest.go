// Package leaktest fails a package's tests if a goroutine outlives them,
// except the few that go-libp2p itself is known to leave behind.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// autorelay: AutoRelay.Close cancels its context and stops the relay finder,
// but its background loop may still take a reachability event that was
// already queued and start the finder again after the stop
// (libp2p/go-libp2p#1457, open; v0.51.0 autorelay.go background/Close).
// That finder's goroutines then run until the process exits. A node closes
// its host only on the way out, so only tests that start and close many
// hosts in one process see them.
var libp2pLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/autorelay.(*relayFinder).background"),
	goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/autorelay.(*relayFinder).findNodes"),
	goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/autorelay.(*relayFinder).handleNewCandidates"),
	goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/autorelay.(*relayFinder).cleanupDisconnectedPeers"),
	goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/autorelay.(*relayFinder).handleNewNode"),
	// mocknet (the node package's scale lab): a stream's transport
	// goroutine delivers what was written with the link's delay and stays
	// blocked on its pipe when the other side closed without reading it
	// all; Mocknet.Close does not end it (v0.51.0 mock_stream.go).
	goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/mock.(*stream).transport"),
}

// VerifyTestMain runs the package's tests, then fails if a goroutine other
// than the known go-libp2p ones is still running.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m, libp2pLeaks...)
}
